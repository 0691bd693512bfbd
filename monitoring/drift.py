"""Drift of one model version's window against its reference profile: per-feature scores and levels.

Levels come from PSI (defaults 0.1 WARNING, 0.2 CRITICAL) and, for the share of confident
predictions, from its absolute change; the KS and chi-squared p-values are reported beside them
and flag a feature (``test_drift``) but do not set its level, since on large windows they call
every negligible shift significant.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from mlops.errors import EmptyWindowError, SmallWindowError
from mlops.reference_profile import NumericProfile, ReferenceProfile, confident_share
from monitoring import stats

Level = Literal["INFO", "WARNING", "CRITICAL"]
LEVELS: tuple[Level, ...] = ("INFO", "WARNING", "CRITICAL")
PROBABILITY = "probability"
CONFIDENT_SHARE = "confident_share"
# Log columns that are neither model inputs nor unexpected (identifiers, answers, flags).
KNOWN_COLUMNS = frozenset({"event_id", "event_timestamp", "logged_at", "model_name", "model_version", "decision",
                           "unknown_categories", "unknown_entities", "role", "customer_id", "merchant_id",
                           "transaction_id", "request_id", "latency_s", PROBABILITY})


class DriftThresholds(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    psi_warning: float = Field(default=0.1, gt=0)
    psi_critical: float = Field(default=0.2, gt=0)
    confident_warning: float = Field(default=0.05, gt=0)
    confident_critical: float = Field(default=0.10, gt=0)
    p_value: float = Field(default=0.05, gt=0, lt=1)
    min_rows: int = Field(default=30, ge=1)

    def level(self, score: float, warning: float, critical: float) -> Level:
        return "CRITICAL" if score >= critical else "WARNING" if score >= warning else "INFO"


class FeatureDrift(BaseModel):
    model_config = ConfigDict(extra="forbid")

    feature: str
    kind: Literal["continuous", "discrete", "categorical", "prediction", "confidence"]
    rows: int
    psi: float | None = None
    test: Literal["ks", "chisquare", "none"] = "none"
    p_value: float | None = None
    test_drift: bool = False
    score: float | None = None  # what the level is read from: PSI, or the confident share's change
    unknown_share: float | None = None
    level: Level = "INFO"
    note: str = ""


class DriftReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_name: str
    model_version: str
    rows: int
    level: Level
    features: list[FeatureDrift]
    ignored_columns: list[str] = []

    def feature(self, name: str) -> FeatureDrift:
        return next(f for f in self.features if f.feature == name)

    def flagged(self) -> list[FeatureDrift]:
        return [f for f in self.features if f.level != "INFO"]


def max_level(levels: list[Level]) -> Level:
    return max(levels, key=LEVELS.index, default="INFO")


def _numeric_drift(name: str, profile: NumericProfile, values: np.ndarray, limits: DriftThresholds,
                   kind: Literal["continuous", "discrete", "prediction"]) -> FeatureDrift:
    if profile.kind == "discrete":
        reference = stats.discrete_reference(profile.values, profile.counts)
        current = stats.value_counts(values)
        psi = stats.psi_from_counts(*stats.aligned_counts(reference, current))
        return FeatureDrift(feature=name, kind="discrete" if kind != "prediction" else kind, rows=values.size,
                            psi=psi, score=psi, level=limits.level(psi, limits.psi_warning, limits.psi_critical))
    psi = stats.psi_binned(profile.edges, profile.bin_counts, values)
    p_value = stats.ks_p(np.asarray(profile.sample), values)
    return FeatureDrift(feature=name, kind=kind, rows=values.size, psi=psi, test="ks", p_value=p_value,
                        test_drift=p_value < limits.p_value, score=psi,
                        level=limits.level(psi, limits.psi_warning, limits.psi_critical))


def _categorical_drift(name: str, reference: dict[str, int], values: pd.Series, unknown: float,
                       limits: DriftThresholds) -> FeatureDrift:
    current = {str(k): int(v) for k, v in values.astype(str).value_counts(sort=False).items()}
    psi = stats.psi_from_counts(*stats.aligned_counts(reference, current))
    p_value = stats.chi_squared_p(reference, current)
    return FeatureDrift(feature=name, kind="categorical", rows=len(values), psi=psi, test="chisquare",
                        p_value=p_value, test_drift=p_value < limits.p_value, score=psi, unknown_share=unknown,
                        level=limits.level(psi, limits.psi_warning, limits.psi_critical))


def _absent(name: str, kind: Literal["continuous", "discrete", "categorical"], note: str) -> FeatureDrift:
    # A profiled input the service stopped sending is a schema change: worth an alert, not a fallback.
    return FeatureDrift(feature=name, kind=kind, rows=0, level="WARNING", note=note)


def compute_drift(window: pd.DataFrame, profile: ReferenceProfile, limits: DriftThresholds | None = None, *,
                  model_name: str = "", model_version: str = "") -> DriftReport:
    """Scores and levels of every profiled input, the predicted probability and the confident share."""
    limits = limits or DriftThresholds()
    if window.empty:
        raise EmptyWindowError("the window holds no predictions")
    if len(window) < limits.min_rows:
        raise SmallWindowError(f"the window holds {len(window)} prediction(s); a drift verdict needs at least "
                               f"{limits.min_rows} (--min-rows)")
    features: list[FeatureDrift] = []
    for name, numeric in profile.numeric.items():
        kind: Literal["continuous", "discrete"] = numeric.kind
        if name not in window:
            features.append(_absent(name, kind, "column absent from the window"))
            continue
        values = pd.to_numeric(window[name], errors="coerce").dropna().to_numpy(dtype="float64")
        if values.size == 0:
            features.append(_absent(name, kind, "no values in the window (all null)"))
            continue
        features.append(_numeric_drift(name, numeric, values, limits, kind))
    # Share of rows whose answer flagged each field's category as unknown (one pass over the flags).
    flagged = (window["unknown_categories"].explode().value_counts() if "unknown_categories" in window
               else pd.Series(dtype="int64"))
    for name, categorical in profile.categorical.items():
        if name not in window:
            features.append(_absent(name, "categorical", "column absent from the window"))
            continue
        present = window[name].dropna()
        if present.empty:
            features.append(_absent(name, "categorical", "no values in the window (all null)"))
            continue
        features.append(_categorical_drift(name, categorical.counts, present,
                                           float(flagged.get(name, 0)) / len(window), limits))
    if not any(f.rows for f in features):
        raise SmallWindowError("no profiled column has values in the window")
    probabilities = window[PROBABILITY].to_numpy(dtype="float64")
    features.append(_numeric_drift(PROBABILITY, profile.probability, probabilities, limits, "prediction"))
    change = abs(confident_share(probabilities, profile.confidence_cutoff) - profile.confident_share)
    features.append(FeatureDrift(feature=CONFIDENT_SHARE, kind="confidence", rows=probabilities.size, score=change,
                                 level=limits.level(change, limits.confident_warning, limits.confident_critical)))
    ignored = sorted(set(window.columns) - KNOWN_COLUMNS - set(profile.numeric) - set(profile.categorical))
    return DriftReport(model_name=model_name, model_version=model_version, rows=len(window),
                       level=max_level([f.level for f in features]), features=features, ignored_columns=ignored)
