"""Training/serving skew: the features the service used for logged predictions against the
offline point-in-time features for the same entities and times (the ones training would get).

A prediction after the newest offline event cannot be compared (the offline store has not seen
that period yet); those are counted, not judged. Label features are reported apart: online they
count only the labels delivered before the prediction was served, offline every label, so they
differ while labels are late without any skew in the code. So are predictions the service flagged
inexact (an event older than its histories reach back, ``features_exact`` false): the service said
so when it answered.
"""

from __future__ import annotations

import math
import random

import pandas as pd
from pydantic import BaseModel, ConfigDict

from mlops.contract import DataContract
from mlops.errors import InputError
from mlops.feature_store import offline_end, offline_features
from mlops.prediction_log import log_dir, read_predictions
from mlops.settings import Settings


class SkewReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    logged: int
    compared: int
    beyond_offline: int
    differing: int
    max_abs_diff: float
    worst_feature: str | None
    worst_event: str | None
    label_features_differing: int = 0  # predictions whose label features differ (labels delivered late)
    flagged_inexact: int = 0  # compared predictions the service answered flagged inexact, never counted as skew

    @property
    def share_differing(self) -> float:
        return self.differing / self.compared if self.compared else 0.0


def check_skew(settings: Settings, contract: DataContract, *, sample: int, tolerance: float,
               seed: int = 0) -> SkewReport:
    """Compare up to ``sample`` logged predictions (a seeded random sample) with offline features."""
    records = read_predictions(log_dir(settings))
    if not records:
        raise InputError(f"no predictions logged under {log_dir(settings)}; serve some traffic first")
    ts = contract.timestamp_column
    newest = offline_end(settings, contract)
    picked = random.Random(seed).sample(records, min(sample, len(records)))
    covered = [r for r in picked if newest is not None and r.event_timestamp <= newest]
    report = SkewReport(logged=len(records), compared=len(covered), beyond_offline=len(picked) - len(covered),
                        differing=0, max_abs_diff=0.0, worst_feature=None, worst_event=None)
    if not covered:
        return report
    # The logged raw inputs carry the request's own values that ratio_to_mean and zscore compare.
    asked = pd.DataFrame([{**r.inputs, **r.entities, ts: pd.Timestamp(r.event_timestamp)} for r in covered])
    answers = offline_features(settings, contract, asked)[contract.feature_names].to_dict("records")
    labels = {f.name for view in contract.feature_views for f in view.features if f.is_label}
    for record, offline in zip(covered, answers, strict=True):
        if not record.features_exact:
            report.flagged_inexact += 1
            continue
        # A feature the service did not log counts as infinitely different.
        diffs = {name: abs(offline[name] - record.features[name]) if name in record.features else math.inf
                 for name in contract.feature_names}
        if any(diffs[name] > tolerance for name in labels):
            report.label_features_differing += 1
        diffs = {name: diff for name, diff in diffs.items() if name not in labels}
        if not diffs:
            continue
        worst = max(diffs, key=diffs.__getitem__)
        largest = diffs[worst]
        if largest > tolerance:
            report.differing += 1
        if largest > report.max_abs_diff:
            report.max_abs_diff, report.worst_feature, report.worst_event = largest, worst, record.event_id
    return report
