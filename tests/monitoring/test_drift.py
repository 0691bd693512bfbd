"""Drift scores and levels on the generator's scenarios, with Evidently as the oracle."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest

from mlops.contract import DataContract
from mlops.errors import EmptyWindowError, SmallWindowError
from mlops.reference_profile import DAY_S, ReferenceProfile, newest_whole_periods
from monitoring import stats
from monitoring.drift import CONFIDENT_SHARE, PROBABILITY, TOP_SCORE_SHARE, DriftReport, compute_drift
from monitoring.drift_summary import by_severity
from monitoring.evidently_report import evidently_scores, evidently_snapshot

if TYPE_CHECKING:
    from served_traffic import Traffic

pytestmark = pytest.mark.integration

AMOUNT_FEATURES = {"amount", "customer_amount_mean_7d", "customer_amount_max_24h", "customer_amount_sum_24h",
                   "merchant_amount_mean_7d"}


def _assert_matches_evidently(report: DriftReport, reference: ReferenceProfile, window: pd.DataFrame) -> None:
    oracle = evidently_scores(evidently_snapshot(report, reference, window))
    ours: dict[tuple[str, str], float | None] = {}
    for feature in report.features:
        if feature.rows != report.rows or feature.psi is None:
            continue  # judged over part of the window (a periodic input), or not scored
        if feature.test != "none" and feature.kind != "discrete":
            ours[(feature.feature, feature.test)] = feature.p_value
        if feature.kind in ("discrete", "categorical"):
            ours[(feature.feature, "psi")] = feature.psi
    assert set(oracle) == set(ours)
    for key, value in ours.items():
        assert value == pytest.approx(oracle[key], abs=1e-6), key


def test_no_drift_is_info_on_every_feature(reference: ReferenceProfile, live: Traffic, contract: DataContract) -> None:
    window = live("none")
    report = compute_drift(window, reference)
    assert {f.feature for f in report.features} == {*contract.numeric_inputs, *contract.model_inputs.categorical,
                                                     PROBABILITY, CONFIDENT_SHARE, TOP_SCORE_SHARE}
    assert report.level == "INFO", [(f.feature, f.score) for f in report.flagged()]
    _assert_matches_evidently(report, reference, window)


def test_inflated_amounts_flag_only_the_amount_features(reference: ReferenceProfile, live: Traffic) -> None:
    window = live("amount_inflation")
    report = compute_drift(window, reference)
    flagged = {f.feature for f in report.flagged()}
    assert report.feature("amount").level == "CRITICAL"
    assert flagged - {PROBABILITY, CONFIDENT_SHARE, TOP_SCORE_SHARE} <= AMOUNT_FEATURES
    assert "amount" in flagged
    # The scoring rule reads the amount: the predictions drift with it (model drift before labels).
    assert report.feature(PROBABILITY).level != "INFO"
    _assert_matches_evidently(report, reference, window)


def test_evidentlys_sections_follow_the_summarys_order(reference: ReferenceProfile, live: Traffic) -> None:
    window = live("amount_inflation")
    report = compute_drift(window, reference)
    sections = [column for column, _ in evidently_scores(evidently_snapshot(report, reference, window))]
    summary = [f.feature for f in by_severity(report.features)]
    assert summary != [f.feature for f in report.features]  # the report's own order is another one
    assert sections[0] == summary[0]
    assert report.feature(summary[0]).level == "CRITICAL"
    assert sorted(sections, key=summary.index) == sections  # a column's sections sit where the summary lists it


def test_a_new_merchant_category_is_flagged_by_chi_squared(reference: ReferenceProfile, live: Traffic) -> None:
    window = live("new_merchant_category")
    report = compute_drift(window, reference)
    category = report.feature("merchant_category")
    assert category.test == "chisquare"
    assert category.test_drift
    assert category.p_value == 0.0
    assert category.level == "CRITICAL"
    assert category.unknown_share == pytest.approx((window["merchant_category"] == "crypto_exchange").mean())
    assert {f.feature for f in report.flagged()} <= {"merchant_category", PROBABILITY, CONFIDENT_SHARE, TOP_SCORE_SHARE}
    _assert_matches_evidently(report, reference, window)


def test_an_empty_window_and_a_single_row_are_refused_by_name(reference: ReferenceProfile, live: Traffic) -> None:
    window = live("none")
    with pytest.raises(EmptyWindowError, match="no predictions"):
        compute_drift(window.iloc[:0], reference)
    with pytest.raises(SmallWindowError, match=r"holds 1 prediction\(s\); a drift verdict needs at least 30"):
        compute_drift(window.iloc[:1], reference)
    assert EmptyWindowError("").exit_code != SmallWindowError("").exit_code


def test_an_all_null_column_and_an_unseen_column_give_a_verdict(reference: ReferenceProfile, live: Traffic) -> None:
    window = live("none").assign(amount=np.nan, brand_new_field="x").drop(columns=["channel"])
    report = compute_drift(window, reference)
    assert report.feature("amount").note == "no values in the window (all null)"
    assert report.feature("channel").note == "column absent from the window"
    assert report.feature("amount").level == report.feature("channel").level == "WARNING"
    assert "brand_new_field" in report.ignored_columns
    assert report.feature("customer_txn_count_1h").level == "INFO"


def test_periodic_inputs_are_judged_only_over_whole_periods(reference: ReferenceProfile, live: Traffic) -> None:
    window = live("none")
    newest = window["event_timestamp"].max()
    two_days = window[window["event_timestamp"] > newest - pd.Timedelta(days=2)].reset_index(drop=True)
    report = compute_drift(two_days, reference)
    for name in ("day_of_week_sin", "day_of_week_cos"):
        assert report.feature(name).note == "not judged: the window covers less than its 168h period"
        assert report.feature(name).level == "INFO"
    hour = report.feature("hour_of_day_cos")
    assert 0 < hour.rows <= len(two_days)
    # A daily input over two whole days is judged: its PSI against the reference's bins.
    hour_profile = reference.numeric["hour_of_day_cos"]
    assert hour.psi == pytest.approx(stats.psi_binned(hour_profile.edges, hour_profile.bin_counts,
                                                      two_days["hour_of_day_cos"].dropna().to_numpy(dtype="float64")))
    assert report.level == "INFO", [(f.feature, f.score, f.note) for f in report.flagged()]
    # Unjudged, the same two days' weekdays are far from the month's: what used to raise CRITICAL.
    week = stats.psi_binned(reference.numeric["day_of_week_cos"].edges,
                            reference.numeric["day_of_week_cos"].bin_counts,
                            two_days["day_of_week_cos"].to_numpy(dtype="float64"))
    assert week > 0.2


def test_a_small_windows_noise_raises_no_level(reference: ReferenceProfile, live: Traffic) -> None:
    small = live("none").iloc[:60]
    report = compute_drift(small, reference)
    assert report.level == "INFO", [(f.feature, f.score, f.note) for f in report.flagged()]
    noisy = [f for f in report.features if f.psi is not None and f.psi >= 0.1]
    assert noisy  # PSI of 60 rows over ten bins is mostly noise ...
    assert all("not significant" in f.note or "not judged" in f.note for f in noisy)  # ... and is called so
    # 60 rows are half a day of this traffic: too short for the score tests' whole day ...
    assert report.feature(TOP_SCORE_SHARE).note == "not judged: the window covers less than the score's 24h period"
    # ... and 60 rows spread over days are whole days, but too few rows for the top-score share.
    spread = compute_drift(live("none").iloc[::50].iloc[:60].reset_index(drop=True), reference)
    top = spread.feature(TOP_SCORE_SHARE)
    assert 0 < top.rows <= 60
    assert re.fullmatch(rf"not judged: {top.rows} rows, this test needs (?:4\d\d|500)", top.note)  # ten of 2 %


def test_whole_periods_of_a_reference_are_counted_from_its_newest_event() -> None:
    moments = pd.Series(pd.date_range("2026-01-01", periods=9_500, freq="90s", tz="UTC"))  # 9.9 days
    in_days, days = newest_whole_periods(moments, DAY_S)
    in_weeks, weeks = newest_whole_periods(moments, 7 * DAY_S)
    assert (days, weeks) == (9, 1)
    assert in_days.sum() == 9 * 960  # 960 events of 90 s a day
    assert in_weeks.sum() == 7 * 960
    assert in_weeks[-1]
    assert not in_weeks[0]
