"""KFP components: thin wrappers around pipelines.tasks, one per step.

Each body imports what it needs (KFP ships the function's source, not this module) and calls one
task. The image holds this repository installed with the [pipelines] extra, so no packages are
installed at run time. No ``from __future__ import annotations`` here: KFP reads the real types.
"""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output

# The platform image (pipelines/Dockerfile); KFP's local runner uses the current environment.
PIPELINE_IMAGE = "ghcr.io/mlops-platform/mlops-python:0.1.0"


@dsl.component(base_image=PIPELINE_IMAGE, install_kfp_package=False)
def ingest(source: str, run_name: str, snapshot: Output[Dataset], since: str = "", until: str = "",
           last_weeks: int = 0) -> NamedTuple(  # type: ignore[valid-type]
    "IngestOutputs", [("run_id", str), ("sha256", str)]
):
    """Snapshot the raw source, keep the rows of the training window, open the pipeline's MLflow run."""
    from collections import namedtuple
    from pathlib import Path

    from pipelines.tasks import configure_logging, ingest_task

    configure_logging()
    run_id, sha256 = ingest_task(source, Path(snapshot.path), run_name, since, until, last_weeks)
    return namedtuple("IngestOutputs", ["run_id", "sha256"])(run_id, sha256)  # type: ignore[call-arg]


@dsl.component(base_image=PIPELINE_IMAGE, install_kfp_package=False)
def validate(snapshot: Input[Dataset], run_id: str, report: Output[Artifact]) -> None:
    """Great Expectations suite from the contract; fails closed."""
    from pathlib import Path

    from pipelines.tasks import configure_logging, validate_task

    configure_logging()
    validate_task(Path(snapshot.path), run_id, Path(report.path))


@dsl.component(base_image=PIPELINE_IMAGE, install_kfp_package=False)
def preprocess(snapshot: Input[Dataset], run_id: str, train: Output[Dataset],
               validation: Output[Dataset], test: Output[Dataset]) -> None:
    """Point-in-time features from Feast, time split, online store materialization."""
    from pathlib import Path

    from pipelines.tasks import configure_logging, preprocess_task

    configure_logging()
    preprocess_task(Path(snapshot.path), run_id,
                    {"train": Path(train.path), "validation": Path(validation.path), "test": Path(test.path)})


@dsl.component(base_image=PIPELINE_IMAGE, install_kfp_package=False)
def train(train: Input[Dataset], validation: Input[Dataset], test: Input[Dataset], run_id: str,
          model: Output[Model]) -> None:
    """PyTorch training (GPU when present, torchrun over all of this pod's GPUs); checkpoints, resumes."""
    from pathlib import Path

    from pipelines.tasks import configure_logging, train_task

    configure_logging()
    train_task(Path(train.path), Path(validation.path), Path(test.path), run_id, Path(model.path))


@dsl.component(base_image=PIPELINE_IMAGE, install_kfp_package=False)
def export(model: Input[Model], test: Input[Dataset], run_id: str, onnx: Output[Model]) -> str:
    """ONNX export with preprocessing and calibration inside, parity check; returns the MLflow model URI."""
    from pathlib import Path

    from pipelines.tasks import configure_logging, export_task

    configure_logging()
    return export_task(Path(model.path), Path(test.path), run_id, Path(onnx.path))


@dsl.component(base_image=PIPELINE_IMAGE, install_kfp_package=False)
def evaluate(train: Input[Dataset], test: Input[Dataset], model: Input[Model], model_uri: str, run_id: str,
             evaluation: Output[Artifact]) -> str:
    """Holdout metrics, slices, behaviour vs. production; registers the candidate; returns "promote" or "reject".

    A single plain output on purpose: kfp.local resolves dsl.If conditions on a task's single
    output but not on a named field of a NamedTuple output (kfp 2.17). The registered version
    is read from the MLflow run by deploy.
    """
    from pathlib import Path

    from pipelines.tasks import configure_logging, evaluate_task

    configure_logging()
    decision, _version = evaluate_task(Path(train.path), Path(test.path), Path(model.path), model_uri, run_id,
                                       Path(evaluation.path))
    return decision


@dsl.component(base_image=PIPELINE_IMAGE, install_kfp_package=False)
def deploy(run_id: str) -> None:
    """Move the serving alias and Production stage to the version this run registered."""
    from pipelines.tasks import configure_logging, deploy_task

    configure_logging()
    deploy_task(run_id)
