"""One task per pipeline step: settings and contract in, the plain step function, MLflow logging out.

KFP components (pipelines/components.py) are one-line wrappers around these, so each step also
runs and tests alone, outside KFP. All steps of one pipeline run log into one MLflow run, which
the ingest task opens; a failing step marks that run FAILED. Each task imports its step's libraries
(Great Expectations, Feast, scikit-learn) itself: a step process loads only what its step uses.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import mlflow
import pandas as pd

from mlops import registry
from mlops.contract import DataContract, load_contract
from mlops.data.ingest import ingest
from mlops.data.training_window import apply_window, resolve_window
from mlops.errors import DataValidationError, PipelineError
from mlops.inference import OnnxModel
from mlops.reference_profile import PROFILE_ARTIFACT, build_profile
from mlops.settings import Settings
from pipelines.logs import configure_logging as configure_logging  # the components import it from here
from pipelines.provenance import git_commit

if TYPE_CHECKING:
    from pipelines.steps.evaluate import EvaluationReport

log = logging.getLogger(__name__)


def _context() -> tuple[Settings, DataContract]:
    """Settings and contract of this step process, with MLflow pointed at the settings' stores."""
    settings = Settings()
    registry.client(settings)
    return settings, load_contract(settings.contract_path)


@contextmanager
def tracked_step(run_id: str, step: str) -> Iterator[None]:
    """Log into the pipeline's MLflow run; a failure tags the run with the step and the reason."""
    with mlflow.start_run(run_id=run_id):
        try:
            yield
        except Exception as exc:
            reason = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            if isinstance(exc, DataValidationError) and exc.report_path:
                reason = f"{reason} (report: {Path(exc.report_path).with_suffix('.html')})"
            mlflow.set_tags({"failed_step": step, "failure_reason": str(reason)[:4000]})
            raise


def ingest_task(source: str, snapshot_out: Path, run_name: str = "", since: str = "", until: str = "",
                last_weeks: int = 0) -> tuple[str, str]:
    """Open the MLflow run, snapshot ``source`` and write its rows inside the training window (all rows
    when none is given; see :mod:`mlops.data.training_window`) to ``snapshot_out``; returns (run_id, sha256)."""
    settings, contract = _context()
    experiment_id = registry.ensure_experiment(settings)
    run = mlflow.MlflowClient().create_run(experiment_id, run_name=run_name or None,
                                           tags={"pipeline": "fraud-training"})
    run_id = run.info.run_id
    with tracked_step(run_id, "ingest"):
        window = resolve_window(since, until, last_weeks)
        snapshot = ingest(source, settings.snapshots_dir, contract)
        snapshot_out.parent.mkdir(parents=True, exist_ok=True)
        mlflow.log_params({"source": source, "dataset_sha256": snapshot.sha256, "dataset_rows": snapshot.rows,
                           "contract": contract.name, "git_commit": git_commit(), "seed": settings.seed})
        mlflow.set_tag("dataset_sha256", snapshot.sha256)
        if window.is_open:
            shutil.copyfile(snapshot.path, snapshot_out)
        else:
            inside, outside = apply_window(pd.read_parquet(snapshot.path), contract.timestamp_column, window)
            inside.to_parquet(snapshot_out, index=False)
            mlflow.log_params({"window_since": window.since.isoformat() if window.since else "",
                               "window_until": window.until.isoformat() if window.until else "",
                               "window_rows": len(inside), "rows_outside_window": outside})
            log.info("training window %s: %d rows kept, %d outside dropped", window.describe(), len(inside), outside)
    log.info("ingested %s: %d rows, sha256 %s, MLflow run %s", source, snapshot.rows, snapshot.sha256, run_id)
    return run_id, snapshot.sha256


def validate_task(snapshot: Path, run_id: str, report_dir: Path) -> None:
    """Validate the snapshot; the report is logged either way and a failure stops the pipeline."""
    from pipelines.steps.validate import check_snapshot, log_validation_to_mlflow, raise_for_failures

    _, contract = _context()
    with tracked_step(run_id, "validate"):
        report = check_snapshot(snapshot, contract, report_dir)
        log_validation_to_mlflow(report, run_id)
        raise_for_failures(report)
    log.info("validation passed: %d expectations on %d rows", len(report.results), report.rows)


def preprocess_task(snapshot: Path, run_id: str, split_paths: dict[str, Path]) -> None:
    """Features, materialization, time split; the splits land at ``split_paths[name]``."""
    from pipelines.steps.preprocess import preprocess

    settings, contract = _context()
    with tempfile.TemporaryDirectory() as tmp, tracked_step(run_id, "preprocess"):
        summaries = preprocess(snapshot, contract, settings, Path(tmp))
        for summary in summaries:
            split_paths[summary.name].parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(summary.path, split_paths[summary.name])
            mlflow.log_params({f"{summary.name}_rows": summary.rows,
                               f"{summary.name}_positives": summary.positives})
        mlflow.log_dict({s.name: s.model_dump() for s in summaries}, "data/splits.json")
    log.info("splits: %s", ", ".join(f"{s.name}={s.rows}" for s in summaries))


def train_task(train: Path, validation: Path, test: Path, run_id: str, model_dir: Path) -> None:
    """Train (under torchrun when this pod has several GPUs); rank 0 leaves model.pt in ``model_dir``."""
    from pipelines.training.entry import launch_on_local_gpus, run_training

    settings, _ = _context()
    paths = {"train": train, "validation": validation, "test": test}
    checkpoints = settings.resolved_checkpoint_dir
    with tracked_step(run_id, "train"):
        if not launch_on_local_gpus(paths, model_dir, checkpoints, run_id):
            run_training(paths, model_dir, checkpoints, run_id=run_id, settings=settings, resume_key=run_id)


def export_task(model_dir: Path, test: Path, run_id: str, onnx_dir: Path) -> str:
    """ONNX export with parity check and calibration figures, logged to MLflow; returns the model URI."""
    from pipelines.training.export import export_step

    settings, contract = _context()
    with tracked_step(run_id, "export"):
        exported = export_step(model_dir, pd.read_parquet(test), contract, onnx_dir, settings.parity_tolerance,
                               run_id)
    export = exported.export
    log.info("exported %s (sha256 %s), parity %.2e", export.onnx_path, export.sha256[:12], export.max_abs_diff)
    return exported.model_uri


def evaluation_metrics(report: EvaluationReport) -> dict[str, float]:
    """The report as flat MLflow metrics: test_*, production_test_*, calibration, slices, behaviour."""
    metrics = {f"test_{k}": v for k, v in report.candidate.model_dump().items()}
    if report.production is not None:
        metrics.update({f"production_test_{k}": v for k, v in report.production.model_dump().items()})
    if report.calibration is not None:
        metrics.update({"test_brier": report.calibration.brier, "test_ece": report.calibration.ece})
    for row in report.slices:
        metrics[f"slice_f1/{row.name.replace('=', '_')}"] = row.f1
    if report.behaviour is not None:
        metrics["behaviour_invariance_max_abs_diff"] = report.behaviour.invariance_max_abs_diff
        metrics["behaviour_directional_mean_delta"] = report.behaviour.directional_mean_delta
    return metrics


def evaluate_task(train: Path, test: Path, model_dir: Path, model_uri: str, run_id: str,
                  eval_dir: Path) -> tuple[str, str]:
    """Score candidate and production, register the candidate with the decision; returns (decision, version)."""
    from pipelines.model_card import render_model_card
    from pipelines.steps.deploy import promotion_tags
    from pipelines.steps.evaluate import QualityGates, evaluate

    settings, contract = _context()
    frame = pd.read_parquet(test)
    candidate = OnnxModel(model_dir / registry.ONNX_FILE)
    prod_version = registry.alias_version(settings)
    gates = QualityGates(slice_f1_tolerance=settings.slice_f1_tolerance,
                         slice_min_positives=settings.slice_min_positives,
                         min_pr_auc_lift=settings.promotion_min_pr_auc_lift)
    with tracked_step(run_id, "evaluate"), tempfile.TemporaryDirectory() as tmp:
        production = None
        if prod_version is not None:
            production = OnnxModel(registry.download_version(settings, prod_version, Path(tmp)).onnx_path)
        report = evaluate(frame, contract, candidate, production, prod_version, settings.promotion_margin,
                          eval_dir, train=pd.read_parquet(train), gates=gates)
        metrics = evaluation_metrics(report)
        mlflow.log_metrics(metrics)
        (eval_dir / "report.json").write_text(report.model_dump_json(indent=2))
        (eval_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))  # DVC's metrics
        # The drift jobs' reference, stored with the run (and so with the version it registers).
        mlflow.log_dict(build_profile(frame, contract, candidate.predict_proba(frame)).model_dump(), PROFILE_ARTIFACT)
        mlflow.log_artifacts(str(eval_dir), "evaluation")
        version = registry.register_version(settings, model_uri, run_id, promotion_tags(report))
        registry.describe_version(settings, version, render_model_card(report, model_name=settings.model_name,
                                                                       version=version, run=mlflow.get_run(run_id)))
        mlflow.set_tags({"decision": report.decision, "decision_reason": report.reason[:4000],
                         "registered_version": version})
    log.info("registered %s v%s: %s (%s)", settings.model_name, version, report.decision, report.reason)
    return report.decision, version


def deploy_task(run_id: str) -> None:
    """Point the serving alias (and the Production stage) at the version this run registered."""
    from pipelines.steps.deploy import deploy_version

    settings, _ = _context()
    with tracked_step(run_id, "deploy"):
        version = mlflow.get_run(run_id).data.tags.get("registered_version")
        if version is None:
            raise PipelineError(f"MLflow run {run_id} registered no model version; nothing to deploy",
                                step="deploy")
        evaluated = registry.client(settings).get_model_version(settings.model_name, version).tags
        compared = evaluated.get("production_version_at_evaluation", "none")
        previous = deploy_version(settings, version, expected=None if compared == "none" else compared,
                                  actor=f"pipeline run {run_id}")
        mlflow.set_tags({"deployed_version": version})
    log.info("%s v%s now holds alias %r (was %s)", settings.model_name, version, settings.serving_alias,
             previous or "none")
