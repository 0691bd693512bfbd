"""The reproducibility gate: train twice with the same seed, data and settings; everything must match.

docs/training.md promises that on the CPU a training run is reproduced exactly: the test metrics to the
last bit and the exported ONNX file to the byte (its SHA-256). The gate trains the newest training
run's logged split files with its logged settings twice, each run in a fresh checkpoint folder (a
second run resuming the first's final checkpoint would prove nothing). Both runs are logged to the
experiment ``<experiment>-gates``, so they never count as the project's training runs.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ci_gates.outcome import GateOutcome, failed, passed
from ci_gates.runs import TRAINED, newest_run
from mlops.errors import ConfigError, TrainingError
from pipelines.settings import PipelineSettings

if TYPE_CHECKING:
    from pipelines.training.command import TrainReport
    from pipelines.training.trainer import TrainParams

GATE = "repro"
_SHOWN_DIFFERENCES = 3


def reproducibility_gate(settings: PipelineSettings, run_id: str | None = None) -> GateOutcome:
    """Train run ``run_id``'s recorded inputs (default: the newest training run's) twice and compare."""
    from pipelines.training.command import recorded_inputs

    run = newest_run(settings, TRAINED, run_id)
    family = run.data.params.get("model_family", "mlp")
    if family != "mlp":  # before its split files are downloaded; `mlops train --reproduce` reruns such a run
        raise ConfigError(f"the reproducibility gate reruns mlp runs; run {run.info.run_id} trained {family}",
                          field="model_family")
    with tempfile.TemporaryDirectory() as tmp:
        _, params, paths = recorded_inputs(settings, run.info.run_id, Path(tmp) / "data")
        if params is None:  # recorded_inputs returns an mlp run's TrainParams or refuses the run
            raise TrainingError(f"run {run.info.run_id} recorded no training settings")
        return check_reproducibility(paths, [params, params], settings, origin=f"run {run.info.run_id[:12]}",
                                     workdir=Path(tmp))


def check_reproducibility(paths: dict[str, Path], runs: Sequence[TrainParams], settings: PipelineSettings, *,
                          origin: str, workdir: Path) -> GateOutcome:
    """Train ``paths`` once per entry of ``runs`` and compare every run with the first, bit for bit.

    The gate passes the same settings twice; its test adds a run with another seed, which must differ.
    """
    from pipelines.training.command import train_and_export

    gate_runs = settings.model_copy(update={"experiment": f"{settings.experiment}-gates"})
    reports: list[TrainReport] = []
    for attempt, params in enumerate(runs, start=1):
        report = train_and_export(paths, workdir / f"train-{attempt}", str(workdir / f"checkpoints-{attempt}"),
                                  gate_runs, params=params)
        if report is None:
            raise TrainingError("the reproducibility gate trains in one process; start it without torchrun")
        reports.append(report)
    first = reports[0]
    mismatches = []
    for attempt, (params, report) in enumerate(zip(runs[1:], reports[1:], strict=True), start=2):
        differences = _differences(first, report)
        if differences:
            shown = "; ".join(differences[:_SHOWN_DIFFERENCES])
            hidden = len(differences) - _SHOWN_DIFFERENCES
            more = f"; and {hidden} more" if hidden > 0 else ""
            mismatches.append(f"run {attempt} (seed {params.seed}) differs from run 1 in {len(differences)}: "
                              f"{shown}{more}")
    seeds = ", ".join(str(p.seed) for p in runs)
    f1s = " vs ".join(f"{r.metrics['test_f1']:.4f}" for r in reports)
    checked = (f"trained the splits of {origin} {len(runs)} times (seeds {seeds}, up to {runs[0].max_epochs} epochs): "
               f"test F1 {f1s}, {len(first.metrics)} test metrics and the ONNX file compared bit for bit")
    return failed(GATE, checked, " | ".join(mismatches)) if mismatches else passed(GATE, checked)


def _differences(first: TrainReport, other: TrainReport) -> list[str]:
    """What differs between two runs' outputs: the ONNX file's hash first, then each test metric."""
    differences = [f"ONNX sha256 {first.onnx_sha256[:12]} vs {other.onnx_sha256[:12]}"
                   ] if first.onnx_sha256 != other.onnx_sha256 else []
    for name, value in sorted(first.metrics.items()):
        if repr(value) != repr(other.metrics.get(name)):
            differences.append(f"{name} {value!r} vs {other.metrics.get(name)!r}")
    return differences
