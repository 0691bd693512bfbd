"""The pipeline's step functions: context and inputs in, the step's code, MLflow logging, a record out.

pipelines/orchestration/declaration.py names these and says what each takes and gives; Kubeflow,
the inline runner and DVC call them through it, so each step also runs and tests alone. All steps
of one pipeline run log into one MLflow run, which the ingest task opens; a failing step marks that
run FAILED. Each task imports its step's libraries (Great Expectations, Feast, scikit-learn)
itself: a step process loads only what its step uses.
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
from mlflow.exceptions import MlflowException

from mlops import registry
from mlops.contract import DataContract
from mlops.data.ingest import ingest
from mlops.data.training_window import apply_window, resolve_window
from mlops.errors import InputError, NotFoundError, mask_credentials
from mlops.inference import OnnxModel
from mlops.preflight import check_source
from mlops.reference_profile import PROFILE_ARTIFACT, build_profile
from mlops.registry_records import VersionDecision
from mlops.settings import Settings
from pipelines.orchestration.context import StepContext
from pipelines.orchestration.records import (
    DeployRecord,
    EvaluateRecord,
    ExportRecord,
    IngestRecord,
    TrainRecord,
    failure_reason,
)
from pipelines.provenance import git_commit
from pipelines.settings import PipelineSettings

if TYPE_CHECKING:
    from pipelines.steps.evaluate import EvaluationReport

log = logging.getLogger(__name__)
MODEL_RUN_SUFFIX = "-model"
# The name the runner gave the pipeline's run (its log file's and records folder's name), kept for
# people: evaluate renames the run after its outcome. The runner reads the records, not this tag.
PIPELINE_RUN_TAG = "pipeline_run"


def outcome_run_name(settings: PipelineSettings, version: str, decision: str) -> str:
    """What a run is called once evaluate has decided: ``<pipeline> v3 promote`` or ``... v4 reject``; a
    model of another family than the default says which: ``<pipeline> v5 xgboost promote``."""
    default = PipelineSettings.model_fields["model_family"].default
    family = "" if settings.model_family == default else f" {settings.model_family}"
    return f"{settings.pipeline_name} v{version}{family} {decision}"


@contextmanager
def tracked_step(run_id: str, step: str) -> Iterator[None]:
    """Log into the pipeline's MLflow run; a failure tags the run with the step and the reason, for the
    MLflow UI (the runner reads the step's FailureRecord). A run the tracking store does not hold (a
    record written under another home) is an InputError naming the run and the store."""
    try:
        run = mlflow.start_run(run_id=run_id)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        store = mask_credentials(mlflow.get_tracking_uri())
        raise InputError(f"{step}: the input record's MLflow run {run_id} is not in the tracking store {store}; "
                         "run the earlier steps with the same MLOPS_HOME (or tracking URI)", field="run_id") from exc
    with run:
        try:
            yield
        except Exception as exc:
            mlflow.set_tags({"failed_step": step, "failure_reason": failure_reason(exc)})
            raise


def ingest_task(context: StepContext, *, source: str, snapshot: Path, run_name: str = "", since: str = "",
                until: str = "", last_weeks: int = 0) -> IngestRecord:
    """Open the MLflow run, snapshot ``source`` and write its rows inside the training window (all rows
    when none is given; see :mod:`mlops.data.training_window`) to ``snapshot``."""
    settings, contract, snapshot_out = context.settings, context.contract, snapshot
    check_source(source)  # a missing file or a malformed window opens no MLflow run
    window = resolve_window(since, until, last_weeks)
    experiment_id = registry.ensure_experiment(settings)
    tags = {"pipeline": settings.pipeline_name, **({PIPELINE_RUN_TAG: run_name} if run_name else {})}
    run = mlflow.MlflowClient().create_run(experiment_id, run_name=run_name or None, tags=tags)
    run_id = run.info.run_id
    with tracked_step(run_id, "ingest"):
        stored = ingest(source, settings.snapshots_dir, contract)
        snapshot_out.parent.mkdir(parents=True, exist_ok=True)
        mlflow.log_params({"source": source, "dataset_sha256": stored.sha256, "dataset_rows": stored.rows,
                           "contract": contract.name, "git_commit": git_commit(), "seed": settings.seed})
        mlflow.set_tag("dataset_sha256", stored.sha256)
        if window.is_open:
            shutil.copyfile(stored.path, snapshot_out)
        else:
            inside, outside = apply_window(pd.read_parquet(stored.path), contract.timestamp_column, window)
            inside.to_parquet(snapshot_out, index=False)
            mlflow.log_params({"window_since": window.since.isoformat() if window.since else "",
                               "window_until": window.until.isoformat() if window.until else "",
                               "window_rows": len(inside), "rows_outside_window": outside})
            log.info("training window %s: %d rows kept, %d outside dropped", window.describe(), len(inside), outside)
    log.info("ingested %s: %d rows, sha256 %s, MLflow run %s", source, stored.rows, stored.sha256, run_id)
    return IngestRecord(run_id=run_id, dataset_sha256=stored.sha256)


def validate_task(context: StepContext, *, snapshot: Path, ingested: IngestRecord, report: Path) -> None:
    """Validate the snapshot; the report (folder ``report``) is logged either way and a failure stops the pipeline."""
    from pipelines.steps.validate import check_snapshot, log_validation_to_mlflow, raise_for_failures

    run_id = ingested.run_id
    with tracked_step(run_id, "validate"):
        result = check_snapshot(snapshot, context.contract, report)
        log_validation_to_mlflow(result, run_id)
        raise_for_failures(result)
    log.info("validation passed: %d expectations on %d rows", len(result.results), result.rows)


def preprocess_task(context: StepContext, *, snapshot: Path, ingested: IngestRecord, train: Path, validation: Path,
                    test: Path) -> None:
    """Features, materialization, time split; the splits land at ``train``, ``validation`` and ``test``."""
    from pipelines.steps.preprocess import preprocess

    split_paths = {"train": train, "validation": validation, "test": test}
    with tempfile.TemporaryDirectory() as tmp, tracked_step(ingested.run_id, "preprocess"):
        summaries = preprocess(snapshot, context.contract, context.settings, Path(tmp))
        for summary in summaries:
            split_paths[summary.name].parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(summary.path, split_paths[summary.name])
            mlflow.log_params({f"{summary.name}_rows": summary.rows,
                               f"{summary.name}_positives": summary.positives})
        mlflow.log_dict({s.name: s.model_dump() for s in summaries}, "data/splits.json")
    log.info("splits: %s", ", ".join(f"{s.name}={s.rows}" for s in summaries))


def start_model_run(settings: Settings, data_run_id: str) -> str:
    """A new MLflow run, nested under the data run, that names the data it trains on; returns its id."""
    from mlflow.exceptions import MlflowException
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    client = registry.client(settings)
    try:
        data_run = client.get_run(data_run_id)
    except MlflowException as exc:
        raise NotFoundError(f"no MLflow run {data_run_id} (the ingest record's data run): {exc.message}") from exc
    tags = {MLFLOW_PARENT_RUN_ID: data_run_id, "pipeline": settings.pipeline_name, "entry": "mlops step train",
            "dataset_sha256": data_run.data.params.get("dataset_sha256", "")}
    run = client.create_run(data_run.info.experiment_id, run_name=f"{data_run.info.run_name}{MODEL_RUN_SUFFIX}",
                            tags=tags)
    return str(run.info.run_id)


def train_task(context: StepContext, *, train: Path, validation: Path, test: Path, ingested: IngestRecord,
               model: Path) -> TrainRecord:
    """Train (under torchrun when this pod has several GPUs); rank 0 leaves model.pt in ``model``."""
    from pipelines.orchestration.environment import environment, record_env
    from pipelines.training.entry import launch_on_local_gpus, run_training
    from pipelines.training.families.bundled import family_for

    settings, model_dir = context.settings, model
    run_id = start_model_run(settings, ingested.run_id) if context.separate_model_run else ingested.run_id
    paths = {"train": train, "validation": validation, "test": test}
    checkpoints = settings.resolved_checkpoint_dir
    with tracked_step(run_id, "train"):
        # torchrun is the platform loop's; a family fitted in one process uses the pod's GPU itself.
        launched = False
        if family_for(settings).platform_loop:
            with environment(record_env(settings)):  # torchrun's processes read the settings from it
                launched = launch_on_local_gpus(paths, model_dir, checkpoints, run_id)
        if not launched:
            run_training(paths, model_dir, checkpoints, run_id=run_id, settings=settings, resume_key=run_id)
    return TrainRecord(run_id=run_id, data_run_id=ingested.run_id)


def export_task(context: StepContext, *, model: Path, test: Path, trained: TrainRecord, onnx: Path) -> ExportRecord:
    """ONNX export with parity check and calibration figures, logged to MLflow as the run's model."""
    from pipelines.training.export import export_step

    settings, contract, run_id = context.settings, context.contract, trained.run_id
    with tracked_step(run_id, "export"):
        exported = export_step(model, pd.read_parquet(test), contract, onnx, settings.parity_tolerance, run_id)
    export = exported.export
    log.info("exported %s (sha256 %s), parity %.2e", export.onnx_path, export.sha256[:12], export.max_abs_diff)
    return ExportRecord(run_id=run_id, model_uri=exported.model_uri)


def evaluation_metrics(report: EvaluationReport) -> dict[str, float]:
    """The report as flat MLflow metrics: test_*, production_test_*, calibration, slices, behaviour."""
    metrics = {f"test_{k}": v for k, v in report.candidate.model_dump().items()}
    if report.production is not None:
        metrics.update({f"production_test_{k}": v for k, v in report.production.model_dump().items()})
    if report.calibration is not None:
        metrics.update({"test_brier": report.calibration.brier, "test_ece": report.calibration.ece})
    for row in report.slices:
        if row.f1 is not None:  # a slice under the minimum size is not scored
            metrics[f"slice_f1/{row.name.replace('=', '_')}"] = row.f1
    if report.behaviour is not None:
        metrics["behaviour_invariance_max_abs_diff"] = report.behaviour.invariance_max_abs_diff
        metrics.update({f"behaviour_directional_mean_delta/{r.input}": r.mean_delta
                        for r in report.behaviour.directional})
    return metrics


def train_keys(train: Path, contract: DataContract) -> pd.DataFrame:
    """What evaluate reads of the training split: its entity keys (the unknown-entity slices), Arrow-backed.
    The whole split as pandas objects was most of a ten-million-row run's peak memory."""
    return pd.read_parquet(train, columns=[e.join_key for e in contract.entities], dtype_backend="pyarrow")


def evaluate_task(context: StepContext, *, train: Path, test: Path, model: Path, exported: ExportRecord,
                  evaluation: Path) -> EvaluateRecord:
    """Score candidate and production, register the candidate with the decision (``model``: the ONNX folder)."""
    from pipelines.model_card import render_model_card
    from pipelines.steps.deploy import promotion_tags
    from pipelines.steps.evaluate import QualityGates, evaluate

    settings, contract, model_dir, eval_dir = context.settings, context.contract, model, evaluation
    run_id, model_uri = exported.run_id, exported.model_uri
    frame = pd.read_parquet(test)
    candidate = OnnxModel(model_dir / registry.ONNX_FILE)
    prod_version = registry.alias_version(settings)
    gates = QualityGates(slice_f1_tolerance=settings.slice_f1_tolerance,
                         slice_min_positives=settings.slice_min_positives,
                         slice_min_rows=settings.slice_min_rows,
                         min_pr_auc_lift=settings.promotion_min_pr_auc_lift)
    with tracked_step(run_id, "evaluate"), tempfile.TemporaryDirectory() as tmp:
        production = None
        if prod_version is not None:
            production = OnnxModel(registry.download_version(settings, prod_version, Path(tmp)).onnx_path)
        report = evaluate(frame, contract, candidate, production, prod_version, settings.promotion_margin,
                          eval_dir, train=train_keys(train, contract), gates=gates)
        metrics = evaluation_metrics(report)
        mlflow.log_metrics(metrics)
        (eval_dir / "report.json").write_text(report.model_dump_json(indent=2))
        (eval_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))  # DVC's metrics
        # The drift jobs' reference, stored with the run (and so with the version it registers).
        profile = build_profile(frame, contract, candidate.predict_proba(frame), candidate.threshold)
        mlflow.log_dict(profile.model_dump(), PROFILE_ARTIFACT)
        mlflow.log_artifacts(str(eval_dir), "evaluation")
        decision = VersionDecision(decision=report.decision, reason=report.reason,
                                   candidate_f1=report.candidate.f1, candidate_pr_auc=report.candidate.pr_auc)
        version = registry.register_version(settings, model_uri, run_id, promotion_tags(report), decision)
        registry.describe_version(settings, version, render_model_card(report, model_name=settings.model_name,
                                                                       version=version, run=mlflow.get_run(run_id)))
        mlflow.set_tags({"decision": report.decision, "decision_reason": report.reason[:4000],
                         "registered_version": version})
        # The runs list then says which run promoted which version, without opening each one.
        mlflow.MlflowClient().update_run(run_id, name=outcome_run_name(settings, version, report.decision))
    log.info("registered %s v%s: %s (%s)", settings.model_name, version, report.decision, report.reason)
    return EvaluateRecord(run_id=run_id, version=version, decision=report.decision, reason=report.reason,
                          production_version_at_evaluation=report.production_version)


def deploy_task(context: StepContext, *, evaluated: EvaluateRecord) -> DeployRecord:
    """Roll the evaluated version out (staging and a canary, or production: deploy_version), only if
    evaluate promoted it.

    The pipeline skips the step for a rejected version; a DVC stage runs it anyway and it leaves the alias alone.
    """
    from pipelines.steps.deploy import deploy_version

    settings, run_id, version = context.settings, evaluated.run_id, evaluated.version
    if evaluated.decision != "promote":
        log.info("%s v%s not promoted (%s); the serving alias stays where it is", settings.model_name, version,
                 evaluated.reason)
        return DeployRecord(run_id=run_id, version=version, promoted=False)
    with tracked_step(run_id, "deploy"):
        rollout = deploy_version(settings, version, expected=evaluated.production_version_at_evaluation,
                                 actor=f"pipeline run {run_id}", reason=evaluated.reason)
        mlflow.set_tags({"deployed_version": version, "rollout": rollout})
    record = DeployRecord(run_id=run_id, version=version, promoted=True, rollout=rollout,
                          canary_percent=settings.canary_percent if rollout == "canary" else None,
                          production_version=registry.alias_version(settings))
    log.info("%s", record.line)
    return record
