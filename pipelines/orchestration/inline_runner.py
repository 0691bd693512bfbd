"""The inline runner: the pipeline's steps called one after another in the current process.

The same declared steps (pipelines/orchestration/declaration.py) in the same order, with the
same condition (deploy only when evaluate says "promote") and one MLflow run, as the compiled
pipeline on kfp.local; only the process per step is gone, and with it the settings' trip through
an environment variable. The records pass as objects and are also written where kfp.local writes them
(``<artifacts>/<step>/record``, a failure's record beside it): the runner reads both runs alike.
A step process pays Python's start-up and its libraries' imports (MLflow, Feast, Great
Expectations, torch: seconds each) every run; inline they are paid once per process, and a
debugger stops inside a step. kfp.local stays the default: it runs the IR YAML that Kubeflow
Pipelines runs. Each step prints kfp.local's "Executing task" / "finished with status" lines, so
the caller's run output times and reports steps the same way.
"""

from __future__ import annotations

import ctypes
import gc
import warnings
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TypeVar

from pipelines.orchestration.context import StepContext, call_step
from pipelines.orchestration.declaration import RECORD, STEPS, Step
from pipelines.orchestration.records import FAILURE, StepRecord, write_record

T = TypeVar("T")


def _step(name: str, call: Callable[[], T]) -> T:
    print(f"Executing task '{name}'", flush=True)
    try:
        result = call()
    except BaseException:
        print(f"Task '{name}' finished with status FAILURE", flush=True)
        raise
    print(f"Task '{name}' finished with status SUCCESS", flush=True)
    return result


def return_freed_memory() -> None:
    """Hand what a finished step freed back to the OS before the next step starts.

    A step process exits and takes its memory with it; inline, the next step would start on top of
    what glibc keeps of the last one's small allocations (pandas' strings, a library's per-thread
    arenas), and the run's peak would be the sum of its steps' leftovers. A no-op off glibc.
    """
    gc.collect()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # the symbols the process has loaded: libc's
    if trim is not None:
        trim(0)


def _python_default_warning_filters() -> None:
    """The filters a fresh interpreter (a kfp.local step process) starts with, whatever the caller
    set: a warning in a step never fails it on kfp.local, so it must not inline either (a test run
    that turns warnings into errors, say)."""
    warnings.resetwarnings()
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.simplefilter("ignore", category)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")


def run_steps(context: StepContext, parameters: Mapping[str, str | int], artifacts: Path,
              steps: tuple[Step, ...] = STEPS) -> dict[str, StepRecord]:
    """Run ``steps`` with the pipeline's ``parameters``, outputs under ``artifacts/<step>/``; a failed step's
    error propagates (its FailureRecord says which step failed and why, as with kfp.local).

    One context (settings, contract, MLflow's URIs) for every step; the records pass as objects.
    Returns the records of the steps that ran, by step.
    """
    records: dict[str, StepRecord] = {}
    with warnings.catch_warnings():
        _python_default_warning_filters()
        for step in steps:
            if step.when is not None and getattr(records[step.when.step], step.when.field) != step.when.equals:
                continue  # the pipeline's dsl.If
            arguments: dict[str, object] = {parameter.name: parameters[parameter.name]
                                            for parameter in step.parameters if parameter.name in parameters}
            for consumed in step.consumes:
                arguments[consumed.name] = artifacts / consumed.step / consumed.output
            for produced in step.produces:
                arguments[produced.name] = artifacts / step.name / produced.name
                (artifacts / step.name).mkdir(parents=True, exist_ok=True)  # as kfp does for an output artifact
            arguments |= {taken.name: records[taken.step] for taken in step.takes}
            record = _step(step.name, partial(_recorded_call, step, context, arguments, artifacts / step.name))
            if record is not None:
                records[step.name] = record
            return_freed_memory()
    return records


def _recorded_call(step: Step, context: StepContext, arguments: Mapping[str, object],
                   folder: Path) -> StepRecord | None:
    """The step's call, its record (or failure) written in ``folder`` before the step is reported finished:
    the runner reads it for the step's headline."""
    record = call_step(step, context, arguments, failure=folder / FAILURE)
    if record is not None:
        write_record(folder / RECORD, record)
    return record
