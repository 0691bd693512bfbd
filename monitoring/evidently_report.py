"""The human drift report, rendered by Evidently from the same reference and window as our scores,
with the same tests per column (KS for continuous inputs, chi-squared for categorical ones, PSI
for discrete and categorical ones; our chi-squared of a discrete numeric input is not Evidently's).
``evidently_scores`` reads Evidently's numbers back: the tests use it as the oracle for ours.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mlops.reference_profile import NumericProfile, ReferenceProfile
from monitoring.drift import PROBABILITY, DriftReport

_METRIC = re.compile(r"ValueDrift\(column=(?P<column>[^,]+),method=(?P<method>[^,]+),")


def _numeric_reference(profile: NumericProfile) -> np.ndarray:
    if profile.kind == "discrete":
        return np.repeat(np.asarray(profile.values, dtype="float64"), profile.counts)
    return np.asarray(profile.sample, dtype="float64")


def reference_frame(profile: ReferenceProfile) -> pd.DataFrame:
    """The profile's reference as one table; shorter columns are padded with nulls, which Evidently drops."""
    columns = {name: pd.Series(_numeric_reference(p)) for name, p in profile.numeric.items()}
    columns[PROBABILITY] = pd.Series(_numeric_reference(profile.probability))
    for name, categorical in profile.categorical.items():
        columns[name] = pd.Series(np.repeat(list(categorical.counts), list(categorical.counts.values())),
                                  dtype=object)
    return pd.DataFrame(columns)


def _tests(report: DriftReport) -> list[tuple[str, str]]:
    """(column, Evidently method) for every score of ours that Evidently computes the same way, in the
    order of the report's summary table (most severe first), so its sections follow the summary."""
    from monitoring.drift_summary import by_severity

    tests: list[tuple[str, str]] = []
    for feature in by_severity(report.features):
        # Evidently sees the whole window: a periodic input judged over part of it is left out.
        if feature.rows == 0 or feature.psi is None or feature.rows != report.rows:
            continue
        if feature.test != "none" and feature.kind != "discrete":
            tests.append((feature.feature, feature.test))
        if feature.kind in ("discrete", "categorical"):
            tests.append((feature.feature, "psi"))
    return tests


def evidently_snapshot(report: DriftReport, profile: ReferenceProfile, window: pd.DataFrame) -> Any:
    """Evidently's ValueDrift with our method for each of our tests, on the profile and the window."""
    with warnings.catch_warnings():
        # evidently 0.7 imports its UI stack at import time: numpy.core, litestar and escape-sequence
        # deprecation warnings that are not ours to fix (and would fail a warnings-as-errors run).
        warnings.simplefilter("ignore")
        from evidently import DataDefinition, Dataset, Report
        from evidently.metrics import ValueDrift

    tests = _tests(report)
    columns = sorted({column for column, _ in tests})
    categorical = [c for c in columns if c in profile.categorical]
    definition = DataDefinition(categorical_columns=categorical,
                                numerical_columns=[c for c in columns if c not in profile.categorical])
    reference = reference_frame(profile)[columns]
    current = window[columns].copy()
    for column in columns:
        if column not in profile.categorical:
            current[column] = pd.to_numeric(current[column], errors="coerce")
        elif isinstance(current[column].dtype, pd.ArrowDtype):  # Evidently reads categories as objects
            current[column] = current[column].astype(object)
    with warnings.catch_warnings():
        # scipy warns dividing by a zero expected count (a category the reference never saw).
        warnings.simplefilter("ignore", RuntimeWarning)
        return Report([ValueDrift(column=c, method=m) for c, m in tests]).run(
            Dataset.from_pandas(current, data_definition=definition),
            Dataset.from_pandas(reference, data_definition=definition))


def evidently_scores(snapshot: Any) -> dict[tuple[str, str], float]:
    """{(column, method): Evidently's value} read from a snapshot of ``evidently_snapshot``."""
    scores: dict[tuple[str, str], float] = {}
    for metric in snapshot.dict()["metrics"]:
        match = _METRIC.match(metric["metric_name"])
        if match:
            scores[(match["column"], match["method"])] = float(metric["value"])
    return scores


def render_html(snapshot: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    snapshot.save_html(str(path))
    return path
