"""One task per pipeline step: settings and contract in, the plain step function, MLflow logging out.

KFP components (pipelines/components.py) are one-line wrappers around these, so each step also
runs and tests alone, outside KFP. All steps of one pipeline run log into one MLflow run, which
the ingest task opens; a failing step marks that run FAILED.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import mlflow
import pandas as pd

from mlops import registry
from mlops.contract import DataContract, load_contract
from mlops.data.ingest import ingest
from mlops.errors import DataValidationError, PipelineError
from mlops.inference import OnnxModel
from mlops.reference_profile import PROFILE_ARTIFACT, build_profile
from mlops.settings import Settings
from pipelines.steps.deploy import deploy_version, promotion_tags
from pipelines.steps.evaluate import evaluate
from pipelines.steps.preprocess import SPLITS, preprocess
from pipelines.steps.validate import check_snapshot, log_validation_to_mlflow, raise_for_failures

log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parents[1]


def _context() -> tuple[Settings, DataContract]:
    """Settings and contract of this step process, with MLflow pointed at the settings' stores."""
    settings = Settings()
    registry.client(settings)
    return settings, load_contract(settings.contract_path)


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip()


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


def ingest_task(source: str, snapshot_out: Path, run_name: str = "") -> tuple[str, str]:
    """Open the MLflow run, snapshot ``source`` and copy it to ``snapshot_out``; returns (run_id, sha256)."""
    settings, contract = _context()
    experiment_id = registry.ensure_experiment(settings)
    run = mlflow.MlflowClient().create_run(experiment_id, run_name=run_name or None,
                                           tags={"pipeline": "fraud-training"})
    run_id = run.info.run_id
    with tracked_step(run_id, "ingest"):
        snapshot = ingest(source, settings.snapshots_dir, contract)
        snapshot_out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(snapshot.path, snapshot_out)
        mlflow.log_params({"source": source, "dataset_sha256": snapshot.sha256, "dataset_rows": snapshot.rows,
                           "contract": contract.name, "git_commit": git_commit(), "seed": settings.seed})
        mlflow.set_tag("dataset_sha256", snapshot.sha256)
    log.info("ingested %s: %d rows, sha256 %s, MLflow run %s", source, snapshot.rows, snapshot.sha256, run_id)
    return run_id, snapshot.sha256


def validate_task(snapshot: Path, run_id: str, report_dir: Path) -> None:
    """Validate the snapshot; the report is logged either way and a failure stops the pipeline."""
    _, contract = _context()
    with tracked_step(run_id, "validate"):
        report = check_snapshot(snapshot, contract, report_dir)
        log_validation_to_mlflow(report, run_id)
        raise_for_failures(report)
    log.info("validation passed: %d expectations on %d rows", len(report.results), report.rows)


def preprocess_task(snapshot: Path, run_id: str, split_paths: dict[str, Path]) -> None:
    """Features, materialization, time split; the splits land at ``split_paths[name]``."""
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


def train_task(train: Path, validation: Path, test: Path, run_id: str, model_dir: Path) -> str:
    """Train, export ONNX with parity check, log to MLflow; returns the logged model URI."""
    from pipelines.steps.train import (
        EpochMetrics,
        TrainParams,
        export_and_check,
        log_training_to_mlflow,
        train_model,
    )

    settings, contract = _context()
    params = TrainParams.from_settings(settings)
    frames = {name: pd.read_parquet(path) for name, path in zip(SPLITS, (train, validation, test), strict=True)}

    def show(epoch: EpochMetrics) -> None:
        log.info("epoch %d/%d: train loss %.4f, val loss %.4f, val PR-AUC %.4f, val ROC-AUC %.4f", epoch.epoch,
                 params.max_epochs, epoch.train_loss, epoch.val_loss, epoch.val_pr_auc, epoch.val_roc_auc)

    with tracked_step(run_id, "train"):
        result = train_model(frames["train"], frames["validation"], contract, params, on_epoch=show)
        run = mlflow.get_run(run_id)
        export = export_and_check(result, contract, frames["test"], model_dir, settings.parity_tolerance,
                                  metadata={"run_id": run_id,
                                            "dataset_sha256": run.data.params.get("dataset_sha256", "")})
        model_uri = log_training_to_mlflow(run_id, params, result, export,
                                           extra_params={"train_device_requested": settings.device})
    log.info("trained on %s: best epoch %d, threshold %.4f, parity %.2e", result.device, result.best_epoch,
             result.threshold, export.max_abs_diff)
    return model_uri


def evaluate_task(test: Path, model_dir: Path, model_uri: str, run_id: str,
                  eval_dir: Path) -> tuple[str, str]:
    """Score candidate and production, register the candidate with the decision; returns (decision, version)."""
    settings, contract = _context()
    frame = pd.read_parquet(test)
    candidate = OnnxModel(model_dir / registry.ONNX_FILE)
    prod_version = registry.alias_version(settings)
    with tracked_step(run_id, "evaluate"), tempfile.TemporaryDirectory() as tmp:
        production = None
        if prod_version is not None:
            production = OnnxModel(registry.download_version(settings, prod_version, Path(tmp)).onnx_path)
        report = evaluate(frame, contract, candidate, production, prod_version, settings.promotion_margin,
                          eval_dir)
        mlflow.log_metrics({f"test_{k}": v for k, v in report.candidate.model_dump().items()})
        if report.production is not None:
            mlflow.log_metrics({f"production_test_{k}": v for k, v in report.production.model_dump().items()})
        (eval_dir / "report.json").write_text(report.model_dump_json(indent=2))
        # The drift jobs' reference, stored with the run (and so with the version it registers).
        mlflow.log_dict(build_profile(frame, contract, candidate.predict_proba(frame)).model_dump(), PROFILE_ARTIFACT)
        mlflow.log_artifacts(str(eval_dir), "evaluation")
        version = registry.register_version(settings, model_uri, run_id, promotion_tags(report))
        mlflow.set_tags({"decision": report.decision, "decision_reason": report.reason,
                         "registered_version": version})
    log.info("registered %s v%s: %s (%s)", settings.model_name, version, report.decision, report.reason)
    return report.decision, version


def deploy_task(run_id: str) -> None:
    """Point the serving alias (and the Production stage) at the version this run registered."""
    settings, _ = _context()
    with tracked_step(run_id, "deploy"):
        version = mlflow.get_run(run_id).data.tags.get("registered_version")
        if version is None:
            raise PipelineError(f"MLflow run {run_id} registered no model version; nothing to deploy",
                                step="deploy")
        previous = deploy_version(settings, version)
        mlflow.set_tags({"deployed_version": version})
    log.info("%s v%s now holds alias %r (was %s)", settings.model_name, version, settings.serving_alias,
             previous or "none")


def configure_logging() -> None:
    """Log lines of a step process (KFP shows them per task): ours at INFO, libraries' at WARNING."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        force=True)
    for name in ("mlops", "pipelines"):
        logging.getLogger(name).setLevel(logging.INFO)
