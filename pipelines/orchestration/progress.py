"""What a person sees of a local pipeline run: one line per step; everything else in the run's log file.

kfp.local prints each task's streamed output and its own notes to stdout and logs through the
root logger. During a run all of it, and the libraries' logs of this process, go through
:class:`RunOutput` into the run's log file (and to the terminal too when verbose). RunOutput reads
kfp's "Executing task" / "finished with status" lines to time each step; the caller adds the
step's headline from the step's record and what it logged to MLflow (:func:`key_figure`).
"""

from __future__ import annotations

import io
import logging
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from pipelines.orchestration.records import DeployRecord, EvaluateRecord, StepRecord

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_STARTED = re.compile(r"Executing task '([\w-]+)'")
_ENDED = re.compile(r"Task '([\w-]+)' finished with status (SUCCESS|FAILURE)")
STEP_WIDTH = 10


@dataclass(frozen=True)
class StepReport:
    step: str
    succeeded: bool
    seconds: float
    figure: str = ""

    @property
    def line(self) -> str:
        """``ingest       14.2 s  30,000 rows, sha256 3f2a9c1e…``"""
        figure = self.figure if self.succeeded else "FAILED"
        return f"{self.step:<{STEP_WIDTH}} {self.seconds:6.1f} s  {figure}".rstrip()


class RunOutput(io.TextIOBase):
    """A text stream: complete lines go to the log file (colours stripped) and, when echoing, on unchanged."""

    def __init__(self, log_file: TextIO, echo: TextIO | None, on_step: Callable[[StepReport], None]) -> None:
        super().__init__()
        self._log = log_file
        self._echo = echo
        self._on_step = on_step
        self._pending = ""
        self._started: dict[str, float] = {}

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._line(line)
        return len(text)

    def flush(self) -> None:
        self._log.flush()
        if self._echo is not None:
            self._echo.flush()

    def finish(self) -> None:
        """Write out a last line that has no newline yet."""
        if self._pending:
            self._line(self._pending)
            self._pending = ""
        self.flush()

    def _line(self, raw: str) -> None:
        plain = ANSI_ESCAPE.sub("", raw)
        self._log.write(plain + "\n")
        if self._echo is not None:
            self._echo.write(raw + "\n")
        if started := _STARTED.search(plain):
            self._started[started[1]] = time.monotonic()
        elif ended := _ENDED.search(plain):
            step = ended[1]
            seconds = time.monotonic() - self._started.pop(step, time.monotonic())
            self._log.flush()
            self._on_step(StepReport(step=step, succeeded=ended[2] == "SUCCESS", seconds=seconds))


@contextmanager
def captured_run_output(log_path: Path, *, verbose: bool,
                        on_step: Callable[[StepReport], None]) -> Iterator[None]:
    """Send stdout, stderr and the root logger to ``log_path`` for the block; ``on_step`` prints to the terminal."""
    terminal_out, terminal_err = sys.stdout, sys.stderr

    def report(step: StepReport) -> None:
        with redirect_stdout(terminal_out), redirect_stderr(terminal_err):
            on_step(step)

    log_path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    with log_path.open("a", encoding="utf-8") as log_file:
        output = RunOutput(log_file, terminal_out if verbose else None, report)
        handler = logging.StreamHandler(output)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        root.handlers[:] = [handler]
        root.setLevel(logging.INFO)
        try:
            with redirect_stdout(output), redirect_stderr(output):
                yield
        finally:
            output.finish()
            root.handlers[:] = saved_handlers
            root.setLevel(saved_level)


def key_figure(step: str, params: Mapping[str, str], metrics: Mapping[str, float], record: StepRecord | None) -> str:
    """The headline of a finished step, from its record and the params and metrics it logged to the
    pipeline's MLflow run ("" if unknown)."""
    if step == "ingest" and "window_rows" in params:
        return (f"{int(params['window_rows']):,} rows in window, {int(params['rows_outside_window']):,} outside "
                f"dropped, sha256 {params.get('dataset_sha256', '')[:8]}…")
    if step == "ingest" and "dataset_rows" in params:
        return f"{int(params['dataset_rows']):,} rows, sha256 {params.get('dataset_sha256', '')[:8]}…"
    if step == "validate" and "validation_expectations" in metrics:
        return f"{int(metrics['validation_expectations'])} expectations passed"
    if step == "preprocess" and "train_rows" in params:
        splits = [(name, params.get(f"{name}_rows")) for name in ("train", "validation", "test")]
        return " / ".join(f"{name} {int(rows):,}" for name, rows in splits if rows is not None) + " rows"
    if step == "train" and "best_epoch" in metrics:
        figure = f"best epoch {int(metrics['best_epoch'])}"
        if "best_val_pr_auc" in metrics:
            figure += f", val PR-AUC {metrics['best_val_pr_auc']:.2f}"
        return figure + (f" ({params['device_used']})" if "device_used" in params else "")
    if step == "export" and "export_max_abs_diff" in metrics:
        return f"ONNX parity vs torch {metrics['export_max_abs_diff']:.1e}"
    if step == "evaluate" and "test_f1" in metrics:
        versus = (f"vs production {metrics['production_test_f1']:.2f}" if "production_test_f1" in metrics
                  else "(no production model yet)")
        decision = record.decision if isinstance(record, EvaluateRecord) else "?"
        return f"test F1 {metrics['test_f1']:.2f} {versus} -> {decision}"
    if step == "deploy" and isinstance(record, DeployRecord) and record.promoted:
        if record.rollout == "canary":
            return f"version {record.version} on staging and canary; production unchanged"
        return f"version {record.version} now serves"
    return ""
