"""``mlops step ...``: one command per declared pipeline step, reading and writing files at the paths given.

The commands are made from the pipeline's declaration (pipelines/orchestration/declaration.py):
an option per parameter, per artifact the step reads or writes, per record it takes, and
``--record`` for the one it returns, all handed to the step function that its Kubeflow task calls.
dvc.yaml's stages run these (pipelines/orchestration/dvc_stages.py writes them). Records travel as
small JSON files (pipelines/orchestration/records.py). Each command reads its input records before
it imports the step's libraries, so a wrong path fails in a second; errors print one line, exit
non-zero.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from mlops_cli.output import console, load_settings
from pipelines.orchestration.declaration import RECORD, STEPS, Step

step_app = typer.Typer(help="Run one pipeline step on files (what dvc.yaml's stages call).", no_args_is_help=True)


def _option(name: str, annotation: Any, help_text: str, default: Any = inspect.Parameter.empty) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[annotation, typer.Option(help=help_text)])


def _options(step: Step) -> list[inspect.Parameter]:
    options = [_option(p.name, p.type, p.help, inspect.Parameter.empty if p.default is None else p.default)
               for p in step.parameters]
    options += [_option(c.name, Path, f"Input: what {c.step} wrote as {c.output}.") for c in step.consumes]
    options += [_option(t.name, Path, f"Input: the record of {t.step} (JSON).") for t in step.takes]
    options += [_option(p.name, Path, f"Output: {p.help}") for p in step.produces]
    if step.record is not None:
        options.append(_option(RECORD, Path, "Output: this step's record (JSON)."))
    return options


def run_step(step: Step, values: dict[str, Any]) -> None:
    """Settings checked first (a bad MLOPS_* value or params file exits 2), then the step, errors as one line."""
    from pipelines.logs import configure_logging
    from pipelines.settings import PipelineSettings

    settings = load_settings(PipelineSettings)
    configure_logging()
    from pipelines.orchestration.context import StepContext, call_step, file_arguments
    from pipelines.orchestration.records import write_record

    paths = {name: value for name, value in values.items() if isinstance(value, Path)}
    arguments = file_arguments(step, values, paths)
    for produced in step.produces:
        paths[produced.name].parent.mkdir(parents=True, exist_ok=True)
    record = call_step(step, StepContext.of(settings, separate_model_run=True), arguments)
    if record is not None:
        write_record(paths[RECORD], record)
        console.print(f"{step.name}: {record.line}", highlight=False)


def _command(step: Step) -> Callable[..., None]:
    def command(**values: Any) -> None:
        run_step(step, values)

    command.__signature__ = inspect.Signature(_options(step))  # type: ignore[attr-defined]  # what typer reads
    command.__doc__ = step.summary
    command.__name__ = f"{step.name}_step"
    return command


for _step in STEPS:
    step_app.command(_step.name)(_command(_step))
