"""What the step commands (``mlops step ...``, dvc.yaml's stages) hand each other besides data files.

In Kubeflow a step's return values (the MLflow run id, the model URI, the decision) travel as
task outputs; run one step per process from files and they travel as small JSON records, one per
step. A record names MLflow state (runs, registered versions), which DVC cannot restore from its
cache, so dvc.yaml declares them uncached: a stage that writes to MLflow really runs.

The data steps (ingest, validate, preprocess) log into the run ingest opens, as in the pipeline.
Train opens a model run nested under it for train, export and evaluate: a changed training
setting reruns only those steps, and MLflow never lets a run's params change, so each rerun is a
new model run beside the old one instead of a rewrite of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from mlops import registry
from mlops.errors import InputError, NotFoundError
from mlops.settings import Settings

MODEL_RUN_SUFFIX = "-model"
REPORT_FILE = "report.json"  # what evaluate_task writes into its evaluation folder


class IngestRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str  # the data run: ingest, validate and preprocess log into it
    dataset_sha256: str  # the snapshot's content hash (the platform's snapshot store keys it so)


class TrainRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str  # the model run: train, export and evaluate log into it
    data_run_id: str


class ExportRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    model_uri: str


class EvaluateRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    version: str
    decision: Literal["promote", "reject"]
    reason: str


class DeployRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    version: str
    promoted: bool


Record = TypeVar("Record", bound=BaseModel)


def read_record(path: Path, kind: type[Record]) -> Record:
    """The record at ``path``; missing or malformed is bad input, named with the file."""
    if not path.is_file():
        raise InputError(f"no step record {path}: run the step that writes it first", field=str(path))
    try:
        return kind.model_validate_json(path.read_text())
    except ValidationError as exc:
        raise InputError(f"{path} is not a {kind.__name__}: {exc.errors()[0]['msg']}", field=str(path)) from exc


def write_record(path: Path, record: BaseModel) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(record.model_dump_json(indent=2) + "\n")


def evaluate_record(run_id: str, version: str, eval_dir: Path) -> EvaluateRecord:
    """The record of an evaluation: the decision and its reason as the step's report states them."""
    from pipelines.steps.evaluate import EvaluationReport  # scikit-learn: only the evaluate step pays for it

    report = EvaluationReport.model_validate_json((eval_dir / REPORT_FILE).read_text())
    return EvaluateRecord(run_id=run_id, version=version, decision=report.decision, reason=report.reason)


def start_model_run(settings: Settings, data_run_id: str) -> str:
    """A new MLflow run, nested under the data run, that names the data it trains on; returns its id."""
    from mlflow.exceptions import MlflowException
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    client = registry.client(settings)
    try:
        data_run = client.get_run(data_run_id)
    except MlflowException as exc:
        raise NotFoundError(f"no MLflow run {data_run_id} (the ingest record's data run): {exc.message}") from exc
    tags = {MLFLOW_PARENT_RUN_ID: data_run_id, "pipeline": "fraud-training", "entry": "mlops step train",
            "dataset_sha256": data_run.data.tags.get("dataset_sha256", "")}
    run = client.create_run(data_run.info.experiment_id, run_name=f"{data_run.info.run_name}{MODEL_RUN_SUFFIX}",
                            tags=tags)
    return str(run.info.run_id)
