"""The model card says what evaluate decided and measured, and where the data came from."""

from __future__ import annotations

import re

import pytest
from mlflow.entities import Metric, Param, Run, RunData, RunInfo, RunTag

from mlops.calibration import CalibrationReport
from pipelines.model_card import render_model_card
from pipelines.steps.evaluate import EvaluationReport, Metrics
from pipelines.steps.promotion import PromotionEvidence
from pipelines.steps.quality import BehaviourReport, DirectionalResult, SliceMetrics

pytestmark = pytest.mark.unit

SNAPSHOT = "ab12" * 16
RUN = Run(RunInfo(run_id="r" * 32, experiment_id="4", user_id="me", status="RUNNING", start_time=0, end_time=None,
                  lifecycle_stage="active"),
          RunData(params=[Param("source", "data/tx.parquet"), Param("dataset_sha256", SNAPSHOT),
                          Param("dataset_rows", "30000"), Param("contract", "fraud"), Param("git_commit", "c0ffee"),
                          Param("train_rows", "21000"), Param("train_positives", "315"),
                          Param("test_rows", "4500"), Param("test_positives", "73")],
                  tags=[RunTag("training_fingerprint", "f1f2")]))


def _report(decision: str, reason: str) -> EvaluationReport:
    return EvaluationReport(
        candidate=Metrics(f1=0.6123, precision=0.87, recall=0.56, roc_auc=0.88, pr_auc=0.6042, threshold=0.5314),
        production=Metrics(f1=0.6001, precision=0.8, recall=0.5, roc_auc=0.87, pr_auc=0.59, threshold=0.5),
        production_version="2", margin=0.02, decision=decision, reason=reason,  # type: ignore[arg-type]
        promotion=PromotionEvidence(rows=4500, base_rate=0.0162, pr_auc_lift=37.3, f1_gain=0.0122,
                                    f1_gain_low=-0.01, f1_gain_high=0.035),
        calibration=CalibrationReport(brier=0.0123, ece=0.0045, bins=[]),
        slices=[SliceMetrics(name="channel=online", rows=900, positives=30, f1=0.7, precision=0.8, recall=0.62),
                SliceMetrics(name="country=NG", rows=3, positives=1, f1=None, precision=None, recall=None)],
        behaviour=BehaviourReport(invariance_fields=["transaction_id"], invariance_max_abs_diff=0.0,
                                  directional=[DirectionalResult(input="amount", direction="not_lower", factor=10.0,
                                                                 mean_delta=0.031)]))


def test_the_card_carries_decision_metrics_threshold_data_and_lineage() -> None:
    reason = "F1 0.6123 does not beat production 0.6001 + margin 0.02"
    card = render_model_card(_report("reject", reason), model_name="fraud-detector", version="3", run=RUN)
    assert card.startswith("# fraud-detector version 3\n")
    assert f"**Decision: reject** - {reason}" in card
    assert "| F1 | 0.6123 | 0.6001 |" in card
    assert "| PR-AUC | 0.6042 | 0.5900 |" in card
    assert "| threshold | 0.5314 | 0.5000 |" in card
    assert "at least **0.5314**" in card
    assert f"snapshot sha256: `{SNAPSHOT}` (30000 rows" in card
    assert "- test: 4500 rows, 73 positive" in card
    assert "Brier score 0.0123, expected calibration error 0.0045" in card
    assert "| channel=online | 900 | 30 | 0.7000 |" in card
    assert "| country=NG | 3 | 1 | (too few rows) | - | - |" in card  # under the minimum: marked, not scored
    assert "- verdict: passed" in card
    assert f"[{'r' * 32}](#/experiments/4/runs/{'r' * 32})" in card
    assert "training fingerprint: `f1f2`" in card
    # What the version's tags no longer carry: the margin and the promotion rule's evidence.
    assert "promotion margin 0.02 on F1" in card
    assert ("Promotion evidence: 4500 test rows, base rate 0.0162, PR-AUC 37.30 times the base rate; F1 gain "
            "over production +0.0122, interval [-0.0100, +0.0350].") in card


def test_the_card_links_its_pictures_and_the_full_report() -> None:
    card = render_model_card(_report("promote", "r"), model_name="m", version="1", run=RUN)
    artifacts = f"#/experiments/4/runs/{'r' * 32}/artifactPath/evaluation"
    links = dict(re.findall(r"\[([^\]]+)\]\(([^)]+)\)", card))
    for picture in ("pr_curve.png", "confusion_matrix.png", "reliability_curve.png"):
        assert links[picture] == f"{artifacts}/{picture}"
    assert links["evaluation/report.json"] == f"{artifacts}/report.json"
    assert "`runs:/" not in card  # no path to copy by hand


def test_a_reason_with_table_characters_stays_on_its_line() -> None:
    card = render_model_card(_report("promote", "no model | in production\nyet"), model_name="m", version="1",
                             run=RUN)
    assert "**Decision: promote** - no model \\| in production yet" in card


def test_the_card_names_the_model_family_and_its_parameters() -> None:
    params = {**RUN.data.params, "model_family": "xgboost", "model_params": '{"max_depth": 4}'}
    run = Run(RUN.info, RunData(params=[Param(k, v) for k, v in params.items()]))
    card = render_model_card(_report("promote", "r"), model_name="m", version="1", run=run)
    assert '## Model\n\n- family: `xgboost`, parameters `{"max_depth": 4}`\n\n## Data' in card
    assert "## Model" not in render_model_card(_report("promote", "r"), model_name="m", version="1", run=RUN)


def test_the_card_names_the_calibration_chosen_on_validation() -> None:
    params = {**RUN.data.params, "calibration": "isotonic", "calibration_setting": "auto"}
    metrics = {**RUN.data.metrics, "val_ece": 0.0031, "val_top_decile_ece": 0.0195}
    run = Run(RUN.info, RunData(metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
                                params=[Param(k, v) for k, v in params.items()]))
    card = render_model_card(_report("promote", "r"), model_name="m", version="1", run=run)
    assert "Calibration map: `isotonic` (setting `auto`; validation ECE 0.0031, top-decile ECE 0.0195)." in card
