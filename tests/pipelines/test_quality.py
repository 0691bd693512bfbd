"""Calibration measures, per-slice metrics, behavioural tests and the gates that block a promotion."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mlops.calibration import calibration_report
from mlops.contract import Behaviour, DataContract, DirectionalTest
from mlops.inference import OnnxModel
from pipelines.steps.calibration import fit_platt
from pipelines.steps.evaluate import QualityGates, apply_gates, evaluate
from pipelines.steps.quality import (
    SliceMetrics,
    behavioural_tests,
    slice_masks,
    slice_metrics,
    slice_regressions,
)
from pipelines.training.export import export_and_check
from pipelines.training.trainer import TrainParams, train_model

Splits = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]
GATES = QualityGates(slice_f1_tolerance=0.1, slice_min_positives=1)


@pytest.fixture(scope="module")
def onnx_model(splits: Splits, contract: DataContract, tmp_path_factory: pytest.TempPathFactory) -> OnnxModel:
    params = TrainParams(seed=2, max_epochs=4, patience=4, batch_size=256, learning_rate=3e-3, device="cpu",
                         hidden_sizes=(32, 16), dropout=0.1, weight_decay=0.0, precision="fp32",
                         compile_model=False)
    result = train_model(splits[0], splits[1], contract, params)
    export = export_and_check(result.trained, contract, splits[2], tmp_path_factory.mktemp("quality"), 1e-5, {})
    return OnnxModel(export.onnx_path)


@pytest.mark.unit
def test_calibration_report_matches_hand_computation() -> None:
    labels = np.array([0, 0, 1, 1])
    proba = np.array([0.05, 0.15, 0.15, 0.95])
    report = calibration_report(labels, proba, bins=10)
    # Brier: (0.05^2 + 0.15^2 + 0.85^2 + 0.05^2) / 4
    assert report.brier == pytest.approx((0.0025 + 0.0225 + 0.7225 + 0.0025) / 4)
    # Bins: [0, .1): one row, predicted .05, observed 0; [.1, .2): two rows, .15 vs .5; [.9, 1]: .95 vs 1.
    assert [(b.count, b.observed_rate) for b in report.bins] == [(1, 0.0), (2, 0.5), (1, 1.0)]
    assert report.ece == pytest.approx(0.25 * 0.05 + 0.5 * 0.35 + 0.25 * 0.05)


@pytest.mark.unit
def test_platt_scaling_repairs_overconfident_scores() -> None:
    rng = np.random.default_rng(0)
    true_logit = rng.normal(-4.0, 1.5, size=20_000)
    labels = (rng.random(true_logit.size) < 1 / (1 + np.exp(-true_logit))).astype(int)
    inflated = 2.0 * true_logit + 5.0  # what class weighting does to a score
    raw = calibration_report(labels, 1 / (1 + np.exp(-inflated)))
    scale, bias = fit_platt(inflated, labels)
    assert scale == pytest.approx(0.5, abs=0.05)
    assert bias == pytest.approx(-2.5, abs=0.25)
    fixed = calibration_report(labels, 1 / (1 + np.exp(-(scale * inflated + bias))))
    assert fixed.ece < 0.01 < raw.ece
    assert fixed.brier < raw.brier


@pytest.mark.unit
def test_calibration_never_reverses_the_ranking() -> None:
    rng = np.random.default_rng(1)
    logits = rng.normal(0.0, 2.0, size=5_000)
    labels = (rng.random(logits.size) < 1 / (1 + np.exp(logits))).astype(int)  # higher logit, *less* fraud
    scale, bias = fit_platt(logits, labels)
    assert scale == 1.0  # a negative slope would flip every decision; only the bias moves
    assert np.mean(1 / (1 + np.exp(-(logits + bias)))) == pytest.approx(labels.mean(), abs=1e-6)


@pytest.mark.unit
def test_slices_cover_categories_and_unknown_entities(splits: Splits, contract: DataContract) -> None:
    train, _, test = splits
    masks = slice_masks(test, train, contract)
    for column in contract.model_inputs.categorical:
        for value in test[column].unique():
            assert masks[f"{column}={value}"].sum() == (test[column] == value).sum()
    unseen = ~test["customer_id"].isin(set(train["customer_id"]))
    assert unseen.any()
    np.testing.assert_array_equal(masks["unknown_customer"], unseen.to_numpy())
    assert all(mask.any() for mask in masks.values())  # an empty slice has no metrics to compare


@pytest.mark.unit
def test_a_slice_regresses_when_its_f1_drops_beyond_the_tolerance() -> None:
    labels = np.array([1, 0, 1, 0, 1, 0])
    proba = np.array([0.9, 0.1, 0.2, 0.8, 0.7, 0.3])
    masks = {"a": np.array([True, True, False, False, False, False]),
             "b": np.array([False, False, True, True, True, True])}
    ours = {s.name: s for s in slice_metrics(labels, proba, 0.5, masks)}
    assert (ours["a"].f1, ours["a"].rows, ours["a"].positives) == (1.0, 2, 1)
    assert ours["b"].f1 == pytest.approx(0.5)  # TP 1 (0.7), FN 1 (0.2), FP 1 (0.8)
    theirs = [SliceMetrics(name="a", rows=2, positives=1, f1=1.0, precision=1, recall=1),
              SliceMetrics(name="b", rows=4, positives=2, f1=0.75, precision=1, recall=1)]
    failed = slice_regressions(list(ours.values()), theirs, tolerance=0.2, min_positives=1)
    assert len(failed) == 1
    assert "slice b" in failed[0]
    assert slice_regressions(list(ours.values()), theirs, tolerance=0.3, min_positives=1) == []
    assert slice_regressions(list(ours.values()), theirs, tolerance=0.2, min_positives=3) == []


@pytest.mark.unit
def test_a_slice_under_the_minimum_size_is_counted_not_scored_nor_gated() -> None:
    labels = np.array([1, 0, 1, 0, 1, 0])
    proba = np.array([0.9, 0.1, 0.2, 0.8, 0.7, 0.3])
    masks = {"tiny": np.array([True, True, False, False, False, False]),
             "big": np.array([False, False, True, True, True, True])}
    ours = {s.name: s for s in slice_metrics(labels, proba, 0.5, masks, min_rows=4)}
    assert (ours["tiny"].rows, ours["tiny"].positives, ours["tiny"].scored) == (2, 1, False)
    assert (ours["tiny"].f1, ours["tiny"].precision, ours["tiny"].recall) == (None, None, None)
    assert ours["big"].scored
    assert ours["big"].f1 == pytest.approx(0.5)
    # A tiny slice that would have regressed (1.0 -> 0.0) blocks nothing: it was not scored.
    theirs = [SliceMetrics(name="tiny", rows=2, positives=1, f1=1.0, precision=1, recall=1),
              SliceMetrics(name="big", rows=4, positives=2, f1=0.5, precision=1, recall=1)]
    assert slice_regressions(list(ours.values()), theirs, tolerance=0.0, min_positives=1) == []


@pytest.mark.unit
def test_gates_turn_a_promotion_into_a_rejection() -> None:
    assert apply_gates("promote", "F1 better", []) == ("promote", "F1 better")
    decision, reason = apply_gates("promote", "F1 better", ["slice country=NG: F1 0.1 < production 0.5 - 0.1"])
    assert decision == "reject"
    assert "country=NG" in reason
    assert apply_gates("reject", "worse", ["x"]) == ("reject", "worse")


@pytest.mark.integration
def test_behavioural_tests_on_the_served_graph(onnx_model: OnnxModel, splits: Splits,
                                               contract: DataContract) -> None:
    report = behavioural_tests(onnx_model, splits[2], contract)
    assert report.invariance_fields == [contract.id_column]
    assert report.invariance_max_abs_diff == 0.0
    [amount] = report.directional  # the one test the contract declares
    assert (amount.input, amount.direction, amount.factor) == ("amount", "not_lower", 3.0)
    assert amount.mean_delta > 0  # a much larger amount than usual looks more like fraud
    assert report.failures == []


@pytest.mark.integration
def test_only_declared_directions_are_tested_and_a_wrong_one_fails(onnx_model: OnnxModel, splits: Splits,
                                                                   contract: DataContract) -> None:
    silent = contract.model_copy(update={"behaviour": Behaviour()})
    assert behavioural_tests(onnx_model, splits[2], silent).directional == []
    wrong = contract.model_copy(update={"behaviour": Behaviour(directional=(
        DirectionalTest(input="amount", direction="not_higher", factor=3.0),))})
    report = behavioural_tests(onnx_model, splits[2], wrong)
    assert report.failures == [f"scaling amount x3 raises the mean score by {report.directional[0].mean_delta:.4f}"]


@pytest.mark.integration
def test_evaluate_reports_calibration_slices_and_behaviour(onnx_model: OnnxModel, splits: Splits,
                                                           contract: DataContract, tmp_path: Path) -> None:
    train, _, test = splits
    report = evaluate(test, contract, onnx_model, onnx_model, "1", 0.0, tmp_path, train=train, gates=GATES)
    assert report.decision == "promote"  # the same model: no slice can regress against itself
    assert report.calibration is not None
    assert report.calibration.ece < 0.1
    assert {s.name for s in report.slices} == {s.name for s in report.production_slices}
    assert any(s.name == "unknown_customer" for s in report.slices)
    # The gates' minimum size decides which slices are scored, for candidate and production alike.
    assert all(s.scored == (s.rows >= GATES.slice_min_rows) for s in report.slices + report.production_slices)
    few = evaluate(test, contract, onnx_model, onnx_model, "1", 0.0, tmp_path / "few", train=train,
                   gates=GATES.model_copy(update={"slice_min_rows": len(test) + 1}))
    assert few.slices
    assert not any(s.scored for s in few.slices)
    assert report.behaviour == behavioural_tests(onnx_model, test, contract)  # run on the test split
    assert (tmp_path / "reliability_curve.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    # The reliability bins beside the picture, as data for `dvc plots`: the report's bins.
    written = pd.read_csv(tmp_path / "reliability.csv").to_dict("records")
    assert written == [pytest.approx(b.model_dump()) for b in report.calibration.bins]
