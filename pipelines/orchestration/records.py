"""What the steps hand each other besides data files: one typed record per step that returns one.

A step function returns its record and the next step takes it as an argument
(pipelines/orchestration/declaration.py says who takes whose). The inline runner passes the object
itself; a Kubeflow task and a DVC stage (``mlops step ...``) write it as a small JSON file, an
output artifact or an uncached DVC out, and the next one reads it back. A record names MLflow state
(runs, registered versions), which DVC cannot restore from its cache: a stage that writes to MLflow
really runs.

The data steps (ingest, validate, preprocess) log into the run ingest opens. In the pipeline train,
export and evaluate log there too; as DVC stages train opens a model run nested under it for the
three (:func:`pipelines.orchestration.tasks.start_model_run`): a changed training setting reruns
only those steps, and MLflow never lets a run's params change, so each rerun is a new model run
beside the old one instead of a rewrite of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from mlops.errors import InputError


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
    promoted: bool  # False: evaluate rejected the version and the serving alias stayed where it was


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
