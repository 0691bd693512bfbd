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

The records, not MLflow tags, are what the runner reports and what a later step decides on: a
failed step leaves a :class:`FailureRecord` where its record would be
(:mod:`pipelines.orchestration.run_records` reads a run's records back). Tags are written for
people and the MLflow UI only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from mlops.errors import ConfigError, DataValidationError, InputError, MLOpsError


class StepRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str  # the MLflow run the step logged into

    @property
    def line(self) -> str:
        """What the step says when it ends (``mlops step ...`` prints it)."""
        return f"MLflow run {self.run_id}"


class IngestRecord(StepRecord):
    dataset_sha256: str  # the snapshot's content hash (the platform's snapshot store keys it so)

    @property
    def line(self) -> str:
        return f"snapshot sha256 {self.dataset_sha256}, MLflow data run {self.run_id}"


class TrainRecord(StepRecord):
    data_run_id: str  # run_id is the model run: train, export and evaluate log into it

    @property
    def line(self) -> str:
        return f"MLflow model run {self.run_id}"


class ExportRecord(StepRecord):
    model_uri: str

    @property
    def line(self) -> str:
        return f"model {self.model_uri}"


class EvaluateRecord(StepRecord):
    version: str
    decision: Literal["promote", "reject"]
    reason: str
    # The production version the candidate was compared with (None: there was none); deploy's
    # compare-and-set refuses to move the alias if production has moved since.
    production_version_at_evaluation: str | None

    @property
    def line(self) -> str:
        return f"registered version {self.version}, decision {self.decision} ({self.reason})"


# How deploy rolled a version out: "first" is production with no model there before (a canary has
# nothing to be compared with), "direct" is production by the settings, "canary" is staging and a canary.
Rollout = Literal["first", "direct", "canary"]


class DeployRecord(StepRecord):
    version: str
    promoted: bool  # False: evaluate rejected the version and the serving alias stayed where it was
    rollout: Rollout | None = None  # None when not promoted
    canary_percent: float | None = None
    production_version: str | None = None  # the production version after the step

    @property
    def line(self) -> str:
        if not self.promoted:
            return f"version {self.version} not promoted; the serving alias stays where it is"
        if self.rollout == "canary":
            return (f"version {self.version} on staging, canary at {self.canary_percent:g} % of the traffic; "
                    f"production stays version {self.production_version}; next: mlops model canary status")
        if self.rollout == "first":
            return f"version {self.version} now serves (the first version: no production model for a canary)"
        return f"version {self.version} now serves (rollout direct)"


class FailureRecord(BaseModel):
    """Which step stopped a run and why: written beside the failed step's outputs (FAILURE), read by the runner."""

    model_config = ConfigDict(extra="forbid")

    step: str
    reason: str
    # The error was the caller's to fix (exit code 2: a bad setting or input); the run exits 2 as well.
    bad_input: bool = False


FAILURE = "failure.json"  # a failed step's FailureRecord, in the folder of its outputs


def failure_reason(exc: BaseException) -> str:
    """What a person reads about a step's failure: the error's own message, a validation report's path."""
    reason = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
    if isinstance(exc, DataValidationError) and exc.report_path:
        reason = f"{reason} (report: {Path(exc.report_path).with_suffix('.html')})"
    return str(reason)[:4000]


def is_bad_input(exc: BaseException) -> bool:
    """The error is the caller's to fix: a platform error of exit code 2 (a setting, an input)."""
    return isinstance(exc, MLOpsError) and exc.exit_code == ConfigError.exit_code


Record = TypeVar("Record", bound=BaseModel)


def read_record(path: Path, kind: type[Record]) -> Record:
    """The record at ``path``; missing or malformed is bad input, named with the file."""
    if not path.is_file():
        raise InputError(f"no step record {path}: run the step that writes it first", field=str(path))
    try:
        return kind.model_validate_json(path.read_text())
    except ValidationError as exc:
        raise InputError(f"{path} is not a {kind.__name__}: {exc.errors()[0]['msg']}", field=str(path)) from exc


def write_record(path: Path, record: StepRecord | FailureRecord) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(record.model_dump_json(indent=2) + "\n")
