"""The ``mlops`` command line: the root command, its small commands, and the command groups registered
from their modules (data.py, pipeline.py, train.py, model.py, monitor.py, step.py, predictions.py ...).
Errors print one line and exit non-zero: 2 for bad input (including data that breaks its contract),
1 for everything else; an MLOpsError from any command is turned into that line in one place, the root
command's group (output.OneLineErrors).

Answering at once: the command modules import only typer, rich's console and mlops.errors. A command
checks its arguments and files first, then loads settings, then imports what does the work
(pandas, MLflow, kfp, torch ...) inside its function, so a mistake is answered in about a second.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from mlops_cli.contract import contract_app
from mlops_cli.data import data_app, features_app
from mlops_cli.init import register as register_init
from mlops_cli.model import model_app
from mlops_cli.monitor import drift_app, labels_app
from mlops_cli.output import OneLineErrors, console
from mlops_cli.output import load_settings as _settings
from mlops_cli.pipeline import demo_command, pipeline_app
from mlops_cli.predict import predict_command
from mlops_cli.predictions import predictions_app
from mlops_cli.step import step_app
from mlops_cli.train import train_command

app = typer.Typer(help="MLOps platform: data -> validated features -> model -> registry -> endpoint.",
                  no_args_is_help=True, pretty_exceptions_enable=False, cls=OneLineErrors)
app.add_typer(data_app, name="data")
app.add_typer(features_app, name="features")
app.add_typer(contract_app, name="contract")
app.add_typer(pipeline_app, name="pipeline")
app.add_typer(model_app, name="model")
app.add_typer(drift_app, name="drift")
app.add_typer(labels_app, name="labels")
app.add_typer(step_app, name="step")
register_init(app)
app.add_typer(predictions_app, name="predictions")


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        console.print(f"mlops {version('mlops-platform')}", highlight=False)
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """MLOps platform: data -> validated features -> model -> registry -> endpoint."""
    # A command prints its own lines: MLflow's "Downloading artifacts" bar (a reference profile, a
    # model) would only interleave with them.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def serve_command(
    workers: Annotated[int, typer.Option(min=1, max=64, help="Server processes sharing the port.")] = 1,
) -> None:
    """Serve the model holding the serving alias over REST (host/port from MLOPS_HOST / MLOPS_PORT)."""
    from serving.main import run
    from serving.settings import ServingSettings

    settings = _settings(ServingSettings)
    run(settings, workers=workers)


app.command("train")(train_command)
app.command("serve")(serve_command)
app.command("demo")(demo_command)
app.command("predict")(predict_command)
