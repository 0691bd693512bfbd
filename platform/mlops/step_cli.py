"""``mlops step ...``: one command per pipeline step, reading and writing files at the paths given.

Each calls the task its Kubeflow component calls (pipelines/orchestration/tasks.py), so dvc.yaml's stages run
the pipeline's own code and declare its files as deps and outs. What a component returns (run id,
model URI, decision) goes to a small JSON record instead (pipelines/orchestration/records.py). Like the
rest of the CLI, the commands import pipelines/ lazily, and each reads its input record before it
imports the step's libraries, so a wrong path fails in a second; errors print one line, exit non-zero.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mlops.cli_output import console, fail, load_settings
from mlops.errors import MLOpsError

if TYPE_CHECKING:
    from mlops.settings import Settings

step_app = typer.Typer(help="Run one pipeline step on files (what dvc.yaml's stages call).", no_args_is_help=True)

RunRecord = Annotated[Path, typer.Option(help="The record of the step before, naming the MLflow run to log into.")]
OutRecord = Annotated[Path, typer.Option(help="Where this step writes its record (JSON).")]


def _run(body: Callable[[Settings], None]) -> None:
    """Settings checked first (a bad MLOPS_* value or params file exits 2), then the step, errors as one line."""
    from pipelines.logs import configure_logging

    settings = load_settings()
    configure_logging()
    try:
        body(settings)
    except MLOpsError as exc:
        fail(exc)


@step_app.command("ingest")
def ingest_step(
    source: Annotated[str, typer.Argument(help="CSV/Parquet path or URL of raw transactions.")],
    snapshot: Annotated[Path, typer.Option(help="Where the rows of the window go (Parquet).")],
    record: OutRecord,
    run_name: Annotated[str, typer.Option(help="Name of the data run it opens in MLflow.")] = "",
    since: Annotated[str, typer.Option(help="Keep rows at or after this time (ISO 8601; default: all).")] = "",
    until: Annotated[str, typer.Option(help="Keep rows before this time (ISO 8601; default: all).")] = "",
    last_weeks: Annotated[int, typer.Option(min=0, help="Keep the last N weeks before --until or now.")] = 0,
) -> None:
    """Snapshot the source (content-addressed), open the data run, write the window's rows."""
    from mlops.preflight import check_source

    def body(settings: Settings) -> None:
        check_source(source)  # before pandas and MLflow are imported
        from pipelines.orchestration.records import IngestRecord, write_record
        from pipelines.orchestration.tasks import ingest_task

        run_id, sha256 = ingest_task(source, snapshot, run_name, since, until, last_weeks)
        write_record(record, IngestRecord(run_id=run_id, dataset_sha256=sha256))
        console.print(f"ingest: snapshot sha256 {sha256}, MLflow data run {run_id}", highlight=False)

    _run(body)


@step_app.command("validate")
def validate_step(
    snapshot: Annotated[Path, typer.Option(help="The ingested rows (Parquet).")],
    run_record: RunRecord,
    report_dir: Annotated[Path, typer.Option(help="Where validation.json and validation.html go.")],
) -> None:
    """Great Expectations suite from the contract; exits non-zero when the data breaks it."""

    def body(settings: Settings) -> None:
        from pipelines.orchestration.records import IngestRecord, read_record

        run_id = read_record(run_record, IngestRecord).run_id
        from pipelines.orchestration.tasks import validate_task

        validate_task(snapshot, run_id, report_dir)

    _run(body)


@step_app.command("preprocess")
def preprocess_step(
    snapshot: Annotated[Path, typer.Option(help="The validated rows (Parquet).")],
    run_record: RunRecord,
    out_dir: Annotated[Path, typer.Option(help="Where train/validation/test.parquet go.")],
) -> None:
    """Point-in-time features through Feast, then the time split."""

    def body(settings: Settings) -> None:
        from pipelines.orchestration.records import IngestRecord, read_record

        run_id = read_record(run_record, IngestRecord).run_id
        from pipelines.steps.preprocess import SPLITS
        from pipelines.orchestration.tasks import preprocess_task

        preprocess_task(snapshot, run_id, {name: out_dir / f"{name}.parquet" for name in SPLITS})

    _run(body)


@step_app.command("train")
def train_step(
    data_dir: Annotated[Path, typer.Option(help="Folder with train/validation/test.parquet.")],
    run_record: Annotated[Path, typer.Option(help="The ingest record: the data run the model run nests under.")],
    model_dir: Annotated[Path, typer.Option(help="Where model.pt and training.json go.")],
    record: OutRecord,
) -> None:
    """Train (GPU when present) in a new MLflow model run nested under the data run."""

    def body(settings: Settings) -> None:
        from pipelines.orchestration.records import IngestRecord, TrainRecord, read_record, start_model_run, write_record

        data_run_id = read_record(run_record, IngestRecord).run_id
        from pipelines.splits import split_paths
        from pipelines.orchestration.tasks import train_task

        paths = split_paths(data_dir)
        run_id = start_model_run(settings, data_run_id)
        train_task(paths["train"], paths["validation"], paths["test"], run_id, model_dir)
        write_record(record, TrainRecord(run_id=run_id, data_run_id=data_run_id))
        console.print(f"train: MLflow model run {run_id}", highlight=False)

    _run(body)


@step_app.command("export")
def export_step(
    model_dir: Annotated[Path, typer.Option(help="The trained model (model.pt, training.json).")],
    test: Annotated[Path, typer.Option(help="The test split (Parquet) for the parity check.")],
    run_record: RunRecord,
    onnx_dir: Annotated[Path, typer.Option(help="Where model.onnx goes.")],
    record: OutRecord,
) -> None:
    """ONNX export with preprocessing and calibration inside, parity-checked, logged to MLflow."""

    def body(settings: Settings) -> None:
        from pipelines.orchestration.records import ExportRecord, TrainRecord, read_record, write_record

        run_id = read_record(run_record, TrainRecord).run_id
        from pipelines.orchestration.tasks import export_task

        onnx_dir.mkdir(parents=True, exist_ok=True)
        write_record(record, ExportRecord(run_id=run_id, model_uri=export_task(model_dir, test, run_id, onnx_dir)))

    _run(body)


@step_app.command("evaluate")
def evaluate_step(
    data_dir: Annotated[Path, typer.Option(help="Folder with train.parquet and test.parquet.")],
    onnx_dir: Annotated[Path, typer.Option(help="The exported model (model.onnx).")],
    run_record: RunRecord,
    eval_dir: Annotated[Path, typer.Option(help="Where metrics.json, report.json, curves and pictures go.")],
    record: OutRecord,
) -> None:
    """Score candidate and production on the test split, register the candidate with the decision."""

    def body(settings: Settings) -> None:
        from pipelines.orchestration.records import ExportRecord, evaluate_record, read_record, write_record

        exported = read_record(run_record, ExportRecord)
        from pipelines.orchestration.tasks import evaluate_task

        _decision, version = evaluate_task(data_dir / "train.parquet", data_dir / "test.parquet", onnx_dir,
                                           exported.model_uri, exported.run_id, eval_dir)
        evaluated = evaluate_record(exported.run_id, version, eval_dir)
        write_record(record, evaluated)
        console.print(f"evaluate: registered version {version}, decision {evaluated.decision} ({evaluated.reason})",
                      highlight=False)

    _run(body)


@step_app.command("deploy")
def deploy_step(
    run_record: Annotated[Path, typer.Option(help="The evaluate record: the version and its decision.")],
    record: OutRecord,
) -> None:
    """Move the serving alias to the evaluated version only when evaluate decided to promote it."""

    def body(settings: Settings) -> None:
        from pipelines.orchestration.records import DeployRecord, EvaluateRecord, read_record, write_record

        evaluated = read_record(run_record, EvaluateRecord)
        if evaluated.decision == "promote":  # the pipeline's dsl.If on evaluate's output
            from pipelines.orchestration.tasks import deploy_task

            deploy_task(evaluated.run_id)
            console.print(f"deploy: version {evaluated.version} now serves", highlight=False)
        else:
            console.print(f"deploy: version {evaluated.version} not promoted ({evaluated.reason}); "
                          "the serving alias stays where it is", highlight=False)
        write_record(record, DeployRecord(run_id=evaluated.run_id, version=evaluated.version,
                                          promoted=evaluated.decision == "promote"))

    _run(body)
