"""Readable local runs: kfp.local's output goes to the run's log file; each finished step is reported.

No ``from __future__ import annotations``: KFP reads the component's real parameter types.
"""

import io
import logging
import sys
import time
from pathlib import Path

import pytest
from kfp import dsl, local

from pipelines.orchestration.progress import RunOutput, StepReport, captured_run_output, key_figure
from pipelines.orchestration.records import DeployRecord, EvaluateRecord

pytestmark = pytest.mark.integration

GREEN, CYAN, RESET = "\x1b[92m", "\x1b[96m", "\x1b[0m"


def test_run_output_times_steps_and_strips_colours(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps: list[StepReport] = []
    echo = io.StringIO()
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])  # the clock RunOutput times steps by
    with (tmp_path / "run.log").open("w") as log_file:
        output = RunOutput(log_file, echo, steps.append)
        output.write(f"12:00:00.000 - INFO - Executing task {CYAN}'ingest'{RESET}\n    step line one\n    step ")
        clock[0] = 114.25  # a step is timed from its start line to its end line
        output.write(f"line two\n12:00:01.000 - INFO - Task {CYAN}'ingest'{RESET} finished with status "
                     f"{GREEN}SUCCESS{RESET}\n")
        output.write("Executing task 'validate'\nTask 'validate' finished with status FAILURE\nno newline")
        output.finish()
    assert [(s.step, s.succeeded, s.seconds) for s in steps] == [("ingest", True, 14.25), ("validate", False, 0.0)]
    logged = (tmp_path / "run.log").read_text()
    assert "\x1b" not in logged
    assert "    step line two\n" in logged
    assert logged.endswith("no newline\n")
    assert GREEN in echo.getvalue()  # the terminal, when echoing, gets kfp's output unchanged


def test_step_line_has_name_duration_and_figure() -> None:
    assert StepReport("ingest", True, 14.24, "30,000 rows").line == "ingest       14.2 s  30,000 rows"
    assert StepReport("validate", False, 3.0, "ignored").line == "validate      3.0 s  FAILED"


def test_captured_output_goes_to_the_log_and_step_reports_to_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_path = tmp_path / "logs" / "run.log"
    root = logging.getLogger()
    handlers_before = root.handlers[:]
    with captured_run_output(log_path, verbose=False, on_step=lambda step: print(f"STEP {step.line}")):
        print("a library prints")
        print("a library warns", file=sys.stderr)
        logging.getLogger("mlflow.store").info("a library logs")
        print("Executing task 'train'")
        print("Task 'train' finished with status SUCCESS")
    out, err = capsys.readouterr()
    assert out.startswith("STEP train ")
    assert "library" not in out + err
    logged = log_path.read_text()
    for line in ("a library prints", "a library warns", "a library logs"):
        assert line in logged
    assert root.handlers == handlers_before


def test_verbose_streams_to_the_terminal_as_well(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_path = tmp_path / "run.log"
    with captured_run_output(log_path, verbose=True, on_step=lambda step: None):
        print("a step streams")
    assert capsys.readouterr().out == "a step streams\n"
    assert log_path.read_text() == "a step streams\n"


@dsl.component(base_image="python:3.11")  # type: ignore[untyped-decorator]  # kfp is untyped
def _shout(word: str) -> str:
    print(f"shouting {word}")
    return word.upper()


@dsl.pipeline(name="two-steps")  # type: ignore[untyped-decorator]
def _two_steps(word: str) -> None:
    first = _shout(word=word)
    _shout(word=first.output).set_caching_options(enable_caching=False)


def test_real_kfp_local_run_is_reported_step_by_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps: list[StepReport] = []
    log_path = tmp_path / "run.log"
    with captured_run_output(log_path, verbose=False, on_step=steps.append):
        local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "kfp"),
                   raise_on_error=True)
        _two_steps(word="hi")
    assert [(s.step, s.succeeded) for s in steps] == [("shout", True), ("shout-2", True)]
    assert capsys.readouterr().out == ""
    logged = log_path.read_text()
    assert "shouting hi" in logged
    assert "shouting HI" in logged


def test_key_figures_come_from_each_steps_record_and_what_it_logged() -> None:
    params = {"dataset_rows": "30000", "dataset_sha256": "3f2a9c1e77", "train_rows": "21000",
              "validation_rows": "4500", "test_rows": "4500", "device_used": "cpu"}
    metrics = {"validation_expectations": 41.0, "best_epoch": 9.0, "best_val_pr_auc": 0.612, "test_f1": 0.61,
               "production_test_f1": 0.59}
    evaluated = EvaluateRecord(run_id="r", version="3", decision="promote", reason="better",
                               production_version_at_evaluation="2")
    deployed = DeployRecord(run_id="r", version="3", promoted=True, rollout="direct", production_version="3")
    assert key_figure("ingest", params, metrics, None) == "30,000 rows, sha256 3f2a9c1e…"
    assert key_figure("validate", params, metrics, None) == "41 expectations passed"
    assert key_figure("preprocess", params, metrics, None) == "train 21,000 / validation 4,500 / test 4,500 rows"
    assert key_figure("train", params, metrics, None) == "best epoch 9, val PR-AUC 0.61 (cpu)"
    assert key_figure("evaluate", params, metrics, evaluated) == "test F1 0.61 vs production 0.59 -> promote"
    rejected = evaluated.model_copy(update={"decision": "reject"})
    assert key_figure("evaluate", params, {"test_f1": 0.5}, rejected) == (
        "test F1 0.50 (no production model yet) -> reject")
    assert key_figure("deploy", params, metrics, deployed) == "version 3 now serves"
    assert key_figure("deploy", params, metrics, deployed.model_copy(update={"rollout": "canary"})) == (
        "version 3 on staging and canary; production unchanged")
    assert key_figure("deploy", {}, {}, None) == ""
    assert key_figure("materialize", params, metrics, None) == ""
