"""``mlops train``: train and export as the pipeline's steps do (the same functions, so the same ONNX
file), then score the test split, all in one MLflow run;
``--reproduce RUN_ID`` does it again from what that run recorded and compares.

Under torchrun every rank trains and rank 0 alone exports and scores.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.entities import Run

from mlops import registry
from mlops.calibration import calibration_report
from mlops.contract import load_contract
from mlops.errors import ConfigError, InputError, NotFoundError, TrainingError
from mlops.inference import OnnxModel
from mlops.registry_client import activate, connect
from mlops.settings import Settings
from pipelines.settings import PipelineSettings
from pipelines.steps.evaluate import compute_metrics
from pipelines.training.entry import file_sha256, run_training
from pipelines.training.export import export_step
from pipelines.training.families.bundled import MLPFamily
from pipelines.training.families.interface import family_class
from pipelines.training.tracking import TRAINING_DATA_ARTIFACTS, params_from_run
from pipelines.training.trainer import TrainParams

log = logging.getLogger(__name__)
ONNX_SUBDIR = "onnx"


@dataclass(frozen=True)
class TrainReport:
    run_id: str
    metrics: dict[str, float]
    onnx_sha256: str
    onnx_path: Path
    model_uri: str  # the logged ONNX model, ready to register


def new_run(settings: Settings, tags: dict[str, str], run_name: str | None = None) -> str:
    experiment_id = registry.ensure_experiment(settings)
    return str(registry.client(settings).create_run(experiment_id, tags=tags, run_name=run_name).info.run_id)


def train_and_export(paths: dict[str, Path], out_dir: Path, checkpoint_dir: str, settings: PipelineSettings, *,
                     run_id: str | None = None, params: TrainParams | None = None) -> TrainReport | None:
    """Train, export and score the test split; None on ranks other than 0."""
    activate(settings)  # training logs through MLflow's fluent API
    given_run = run_id
    if run_id is None and os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 alone opens a run
        run_id = new_run(settings, {"entry": "mlops train"}, run_name=f"train {settings.model_family}")
    # A rerun of the same command resumes: the checkpoint folder follows the run id only when one was given.
    outcome = run_training(paths, out_dir, checkpoint_dir, run_id=run_id, params=params, settings=settings,
                           resume_key=given_run)
    if not outcome.is_main or run_id is None:
        return None
    return export_and_score(paths, out_dir, settings, run_id)


def export_and_score(paths: dict[str, Path], out_dir: Path, settings: PipelineSettings, run_id: str) -> TrainReport:
    """Export what the train step left in ``out_dir`` (parity checked, logged as ``run_id``'s model) and score
    the test split with the served graph, the metrics logged to the run."""
    contract = load_contract(settings.contract_path)
    test = pd.read_parquet(paths["test"])
    exported = export_step(out_dir, test, contract, out_dir / ONNX_SUBDIR, settings.parity_tolerance, run_id)
    export = exported.export
    served = OnnxModel(export.onnx_path)
    labels = test[contract.label_column].to_numpy().astype(int)
    proba = served.predict_proba(test)
    calibrated = calibration_report(labels, proba)
    scores = {f"test_{k}": v for k, v in compute_metrics(labels, proba, served.threshold).model_dump().items()}
    scores.update({"test_brier": calibrated.brier, "test_ece": calibrated.ece})
    with mlflow.start_run(run_id=run_id):
        mlflow.log_metrics(scores)
    return TrainReport(run_id=run_id, metrics={**scores, **exported.metrics}, onnx_sha256=export.sha256,
                       onnx_path=export.onnx_path, model_uri=exported.model_uri)


def recorded_inputs(settings: Settings, run_id: str, into: Path) -> tuple[Run, TrainParams | None, dict[str, Path]]:
    """The training settings and split files a run logged, the files checked against their logged hashes.

    The platform loop's settings (TrainParams) for an ``mlp`` run; None for a family fitted in one
    process (xgboost, sklearn), whose family params and seed the run records instead.
    """
    stores = connect(settings)
    try:
        run = stores.client.get_run(run_id)
    except mlflow.exceptions.MlflowException as exc:
        raise NotFoundError(f"no MLflow run {run_id!r}: {exc.message}") from exc
    logged = run.data.params
    # Runs from before families were MLPs.
    family = logged.get("model_family", MLPFamily.name)
    params = None
    if family == MLPFamily.name:
        try:
            params = params_from_run(logged)
        except ValueError as exc:
            raise InputError(f"run {run_id} did not record its training settings (not a training run?)") from exc
    elif family_class(family).platform_loop:  # a user's torch module
        raise ConfigError(f"run {run_id} trained the {family} family; --reproduce reruns mlp runs and those "
                          "of the families fitted in one process (xgboost, sklearn) so far", field="model_family")
    elif "seed" not in logged:
        raise InputError(f"run {run_id} did not record its seed (a {family} run from before --reproduce covered "
                         "its family); train it again to reproduce it later")
    else:
        family_params(run)  # unreadable params stop here, before the split files are downloaded
    local = stores.download(into, run_id=run_id, artifact_path=TRAINING_DATA_ARTIFACTS)
    paths = {name: logged_split(local, name) for name in ("train", "validation", "test")}
    for name, path in paths.items():
        expected = logged.get(f"{name}_sha256")
        if not path.is_file() or file_sha256(path) != expected:
            raise TrainingError(f"run {run_id}: logged {name} split is missing or does not match its hash")
    return run, params, paths


def family_params(run: Run) -> dict[str, object]:
    """The family params a run of a family fitted in one process recorded (``model_params``, JSON)."""
    try:
        params = json.loads(run.data.params["model_params"])
    except (KeyError, ValueError) as exc:  # absent, or cut at MLflow's 6,000 characters
        raise InputError(f"run {run.info.run_id} did not record its family params in full (model_params); "
                         "train it again to reproduce it later", field="model_params") from exc
    if not isinstance(params, dict):
        raise InputError(f"run {run.info.run_id}: model_params is not a JSON object", field="model_params")
    return params


def logged_split(folder: Path, name: str) -> Path:
    """A split file as a training run logged it: ``train.parquet`` (``mlops train``), or ``train`` (the
    pipeline's train step logs its KFP artifact files, which have no extension)."""
    named = folder / f"{name}.parquet"
    return named if named.is_file() else folder / name


def reproduce(run_id: str, out_dir: Path, settings: PipelineSettings) -> tuple[TrainReport, dict[str, tuple[str, str]]]:
    """Re-run ``run_id`` from its recorded inputs in a new run; returns the report and {name: (then, now)}."""
    with tempfile.TemporaryDirectory() as tmp:
        original, params, paths = recorded_inputs(settings, run_id, Path(tmp) / "data")
        # The family, its params and seed and the calibration setting the run trained with, whatever this
        # environment's settings say; runs from before the calibration was a choice were calibrated by Platt.
        logged = original.data.params
        recorded: dict[str, object] = {"model_family": logged.get("model_family", MLPFamily.name),
                                       "calibration": logged.get("calibration_setting", "platt")}
        if params is None:  # a family fitted in one process
            recorded |= {"model_params": family_params(original), "seed": int(logged["seed"])}
        settings = settings.model_copy(update=recorded)
        again = new_run(settings, {"entry": "mlops train --reproduce", "reproduces": run_id})
        # A fresh checkpoint folder: resuming the original's final checkpoint would prove nothing.
        report = train_and_export(paths, out_dir, str(Path(tmp) / "checkpoints"), settings, run_id=again,
                                  params=params)
    if report is None:
        raise TrainingError("reproduce runs in one process; start it without torchrun")
    then = {k: v for k, v in original.data.metrics.items() if k.startswith("test_")}
    compared = {k: (repr(v), repr(report.metrics.get(k))) for k, v in sorted(then.items())}
    compared["onnx_sha256"] = (original.data.tags.get("onnx_sha256", ""), report.onnx_sha256)
    return report, compared
