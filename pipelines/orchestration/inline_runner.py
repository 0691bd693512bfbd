"""The inline runner: the pipeline's steps called one after another in the current process.

The same tasks (pipelines.orchestration.tasks) in the same order, with the same condition (deploy only when
evaluate says "promote") and one MLflow run, as the compiled pipeline on kfp.local; only the
process per step is gone. A step process pays Python's start-up and its libraries' imports
(MLflow, Feast, Great Expectations, torch: seconds each) every run; inline they are paid once
per process, and a debugger stops inside a step. kfp.local stays the default: it runs the IR
YAML that Kubeflow Pipelines runs. Each step prints kfp.local's "Executing task" / "finished
with status" lines, so the caller's run output times and reports steps the same way.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

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


def _python_default_warning_filters() -> None:
    """The filters a fresh interpreter (a kfp.local step process) starts with, whatever the caller
    set: a warning in a step never fails it on kfp.local, so it must not inline either (a test run
    that turns warnings into errors, say)."""
    warnings.resetwarnings()
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.simplefilter("ignore", category)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")


def run_steps(source: str, run_name: str, artifacts: Path, *, since: str = "", until: str = "",
              last_weeks: int = 0) -> None:
    """Run every step on ``source``, outputs under ``artifacts/<step>/``; a failed step's error propagates
    (the pipeline's MLflow run holds which step failed and why, as with kfp.local).

    Settings reach the tasks through MLOPS_* variables, as they reach kfp.local's step processes.
    """
    from pipelines import tasks

    snapshot = artifacts / "ingest" / "snapshot"
    splits = {name: artifacts / "preprocess" / name for name in ("train", "validation", "test")}
    model_dir, onnx_dir = artifacts / "train" / "model", artifacts / "export" / "onnx"
    for output in (snapshot, *splits.values(), model_dir, onnx_dir):
        output.parent.mkdir(parents=True, exist_ok=True)  # as kfp does for an output artifact
    with warnings.catch_warnings():
        _python_default_warning_filters()
        run_id, _ = _step("ingest", lambda: tasks.ingest_task(source, snapshot, run_name, since, until, last_weeks))
        _step("validate", lambda: tasks.validate_task(snapshot, run_id, artifacts / "validate" / "report"))
        _step("preprocess", lambda: tasks.preprocess_task(snapshot, run_id, splits))
        _step("train", lambda: tasks.train_task(splits["train"], splits["validation"], splits["test"], run_id,
                                                model_dir))
        model_uri = _step("export", lambda: tasks.export_task(model_dir, splits["test"], run_id, onnx_dir))
        decision, _ = _step("evaluate", lambda: tasks.evaluate_task(
            splits["train"], splits["test"], onnx_dir, model_uri, run_id, artifacts / "evaluate" / "evaluation"))
        if decision == "promote":
            _step("deploy", lambda: tasks.deploy_task(run_id))
