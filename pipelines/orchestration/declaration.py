"""The training pipeline, declared once: its steps, what each takes and gives, where it runs.

ingest -> validate -> preprocess -> train -> export -> evaluate -> (if better) deploy.

Everything that runs the pipeline is made from :data:`STEPS`: the Kubeflow pipeline
(pipelines/orchestration/kfp_pipeline.py, compiled to pipelines/training_pipeline.yaml), the
inline runner (pipelines/orchestration/inline_runner.py), the ``mlops step`` commands and the DVC
stages in dvc.yaml (pipelines/orchestration/dvc_stages.py). A step is the plain typed function it
names, called with keyword arguments: a :class:`~pipelines.orchestration.context.StepContext`
(settings, contract), its parameters, the paths of the artifacts it reads and writes, and the
records of the steps before it; it returns its own record (or None). A new step is one more entry
here; the builders take the tuple of steps as an argument, so a test can hand them an extended one.

Only the standard library, pydantic and the records here: the CLI reads this before any step
library is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mlops.contracts import BUNDLED_CONTRACT
from pipelines.orchestration.records import (
    DeployRecord,
    EvaluateRecord,
    ExportRecord,
    IngestRecord,
    StepRecord,
    TrainRecord,
)

ArtifactKind = Literal["Dataset", "Model", "Artifact"]
RECORD = "record"  # the name of a step's record output (a Kubeflow artifact, a DVC out, a CLI option)


@dataclass(frozen=True)
class Parameter:
    """A value the run is started with (a pipeline parameter); the steps taking it get it by name."""

    name: str
    type: type[str] | type[int]
    default: str | int | None = None  # None: required
    help: str = ""


@dataclass(frozen=True)
class Produces:
    """An artifact the step writes at the path it is given (a file or a folder)."""

    name: str
    kind: ArtifactKind
    help: str = ""


@dataclass(frozen=True)
class Consumes:
    """An artifact of an earlier step, passed as the path of argument ``name``."""

    name: str
    step: str
    output: str


@dataclass(frozen=True)
class Takes:
    """The record of an earlier step, passed as argument ``name``."""

    name: str
    step: str


@dataclass(frozen=True)
class When:
    """Run the step only when field ``field`` of ``step``'s record equals ``equals`` (Kubeflow: dsl.If)."""

    step: str
    field: str
    equals: str
    name: str


@dataclass(frozen=True)
class Resources:
    """What the step's pod asks for on Kubeflow (kfp.local, inline and DVC ignore it)."""

    gpus: int = 0  # whole GPUs through the GPU queue (pipelines/cluster.py)
    cpu: str | None = None  # a Kubernetes quantity, e.g. "2"
    memory: str | None = None  # e.g. "8G"


@dataclass(frozen=True)
class Stage:
    """What DVC needs beyond the artifacts and records the step reads and writes, and beyond the code
    and params derived from the step function (pipelines/orchestration/stage_deps.py)."""

    data: tuple[str, ...] = ()  # repository files, not modules, whose change makes the stage stale
    files: tuple[tuple[str, str], ...] = ()  # (parameter, path): a parameter that names a file the stage reads
    metrics: tuple[str, ...] = ()  # metrics files inside the step's outputs, relative to its output folder


@dataclass(frozen=True)
class Step:
    name: str
    function: str  # "module:function", the plain typed step function
    summary: str  # one line: the Kubeflow component's description, the command's help
    parameters: tuple[Parameter, ...] = ()
    consumes: tuple[Consumes, ...] = ()
    takes: tuple[Takes, ...] = ()
    produces: tuple[Produces, ...] = ()
    record: type[StepRecord] | None = None
    after: tuple[str, ...] = ()  # steps that must finish first although no output of theirs is read
    when: When | None = None
    resources: Resources = field(default_factory=Resources)
    stage: Stage = field(default_factory=Stage)

    def produced(self, name: str) -> Produces:
        for output in self.produces:
            if output.name == name:
                return output
        raise KeyError(f"step {self.name!r} produces no {name!r}")


def _consumes(step: str, *outputs: str) -> tuple[Consumes, ...]:
    return tuple(Consumes(name=output, step=step, output=output) for output in outputs)


_WINDOW = (
    Parameter("run_name", str, "", "Name of the MLflow run it opens."),
    Parameter("since", str, "", "Keep rows at or after this time (ISO 8601; default: all)."),
    Parameter("until", str, "", "Keep rows before this time (ISO 8601; default: all)."),
    Parameter("last_weeks", int, 0, "Keep the last N weeks before until or now (resolved when ingest runs)."),
)
_INGESTED = (Takes("ingested", "ingest"),)
_SPLITS = ("train", "validation", "test")
_TASKS = "pipelines.orchestration.tasks"
# The bundled contract the stages' settings name, as a path from the repository root.
BUNDLED_CONTRACT_PATH = f"platform/mlops/contracts/{BUNDLED_CONTRACT.name}"

STEPS: tuple[Step, ...] = (
    Step("ingest", f"{_TASKS}:ingest_task",
         "Snapshot the raw source, keep the rows of the training window, open the pipeline's MLflow run.",
         parameters=(Parameter("source", str, None, "CSV/Parquet path or URL of raw transactions."), *_WINDOW),
         produces=(Produces("snapshot", "Dataset", "The rows of the window (Parquet)."),), record=IngestRecord,
         stage=Stage(data=(BUNDLED_CONTRACT_PATH,), files=(("source", ".mlops/dvc/raw/transactions.csv"),))),
    Step("validate", f"{_TASKS}:validate_task", "Great Expectations suite from the contract; fails closed.",
         consumes=_consumes("ingest", "snapshot"), takes=_INGESTED,
         produces=(Produces("report", "Artifact", "validation.json and validation.html."),),
         stage=Stage(data=(BUNDLED_CONTRACT_PATH,))),
    Step("preprocess", f"{_TASKS}:preprocess_task",
         "Point-in-time features from Feast, time split, online store materialization.",
         consumes=_consumes("ingest", "snapshot"), takes=_INGESTED,
         produces=tuple(Produces(name, "Dataset", f"The {name} split (Parquet).") for name in _SPLITS),
         after=("validate",),  # only validated data gets features
         stage=Stage(data=(BUNDLED_CONTRACT_PATH,))),
    Step("train", f"{_TASKS}:train_task",
         "Training of the chosen model family (GPU when present, torchrun over all of this pod's GPUs).",
         consumes=_consumes("preprocess", *_SPLITS), takes=_INGESTED,
         produces=(Produces("model", "Model", "model.pt and training.json."),), record=TrainRecord,
         resources=Resources(gpus=1),
         # The contract's model: section chooses the family, its parameters and the calibration.
         stage=Stage(data=(BUNDLED_CONTRACT_PATH,))),
    Step("export", f"{_TASKS}:export_task",
         "ONNX export with preprocessing and calibration inside, parity check, logged as an MLflow model.",
         consumes=(Consumes("model", "train", "model"), Consumes("test", "preprocess", "test")),
         takes=(Takes("trained", "train"),),
         produces=(Produces("onnx", "Model", "model.onnx."),), record=ExportRecord),
    Step("evaluate", f"{_TASKS}:evaluate_task",
         "Holdout metrics, slices, behaviour vs. production; registers the candidate with the decision.",
         consumes=(Consumes("train", "preprocess", "train"), Consumes("test", "preprocess", "test"),
                   Consumes("model", "export", "onnx")),
         takes=(Takes("exported", "export"),),
         produces=(Produces("evaluation", "Artifact", "metrics.json, report.json, curves and pictures."),),
         record=EvaluateRecord,
         stage=Stage(metrics=("evaluation/metrics.json",))),
    Step("deploy", f"{_TASKS}:deploy_task",
         "Move the serving alias and Production stage to the version evaluate registered.",
         takes=(Takes("evaluated", "evaluate"),), record=DeployRecord,
         when=When("evaluate", "decision", "promote", name="better-than-production")),
)


def step_named(name: str, steps: tuple[Step, ...] = STEPS) -> Step:
    for step in steps:
        if step.name == name:
            return step
    raise KeyError(f"no pipeline step {name!r}; declared: {', '.join(s.name for s in steps)}")


def record_type(step: Takes, steps: tuple[Step, ...] = STEPS) -> type[StepRecord]:
    """The record class of the step that ``step`` takes the record of."""
    kind = step_named(step.step, steps).record
    if kind is None:
        raise KeyError(f"step {step.step!r} returns no record to take")
    return kind


def pipeline_parameters(steps: tuple[Step, ...] = STEPS) -> tuple[Parameter, ...]:
    """Every step's parameters once, in order of first use: the pipeline's own parameters."""
    seen: dict[str, Parameter] = {}
    for step in steps:
        for parameter in step.parameters:
            seen.setdefault(parameter.name, parameter)
    return tuple(seen.values())


def exposed_field(step: Step, steps: tuple[Step, ...] = STEPS) -> str | None:
    """The record field a later step's condition reads: Kubeflow gets it as the task's single output."""
    fields = {other.when.field for other in steps if other.when is not None and other.when.step == step.name}
    if len(fields) > 1:
        raise ValueError(f"step {step.name!r}: conditions on several fields {sorted(fields)}; Kubeflow takes one")
    return next(iter(fields), None)
