"""``mlops train``: train, export ONNX and score the test split from prepared splits (the same
train+export path as the pipeline's steps), optionally after a hyperparameter search; compare several
families on the same splits and register the best; or reproduce a recorded run and compare."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mlops_cli.output import console
from mlops_cli.output import error_exit as _error_exit
from mlops_cli.output import load_settings as _settings

if TYPE_CHECKING:
    from pipelines.settings import PipelineSettings


def train_command(
    data_dir: Annotated[Path | None, typer.Option(help="Folder with train/validation/test.parquet.")] = None,
    out_dir: Annotated[Path | None, typer.Option(help="Where model.pt, training.json and onnx/ go.")] = None,
    checkpoint_dir: Annotated[str | None, typer.Option(
        help="Local path or fsspec URL for checkpoints (default MLOPS_CHECKPOINT_DIR).")] = None,
    run_id: Annotated[str | None, typer.Option(help="MLflow run to log into (default: a new run).")] = None,
    reproduce: Annotated[str | None, typer.Option(help="Re-run this MLflow run from its recorded inputs.")] = None,
    search: Annotated[int, typer.Option(
        min=0, help="Optuna trials in the family's own space before training with the best.")] = 0,
    family: Annotated[str | None, typer.Option(
        help="The family to train (as MLOPS_MODEL_FAMILY), or several, comma-separated: each trains on the "
        "same splits as a nested run and the best on validation PR-AUC is exported and registered.")] = None,
) -> None:
    """Train, export ONNX and score the test split (also under torchrun); --family a,b, --search, --reproduce."""
    from pipelines.splits import split_paths

    if reproduce is not None and (data_dir is not None or search or run_id is not None or family is not None):
        _error_exit("--reproduce takes no --data-dir, --run-id, --search or --family: it reuses the run's inputs", 2)
    if reproduce is None and data_dir is None:
        _error_exit("--data-dir is required (or --reproduce RUN_ID)", 2)
    paths = split_paths(data_dir) if data_dir is not None else {}
    from pipelines.settings import PipelineSettings

    settings = _settings(PipelineSettings)
    families: list[str] = []
    if family is not None:
        from pipelines.training.compare import parse_families

        families = parse_families(family)
        if len(families) > 1 and run_id is not None:
            _error_exit("--family a,b opens its own runs (one parent, a nested run per family): drop --run-id", 2)
        if len(families) > 1 and os.environ.get("WORLD_SIZE", "1") != "1":
            _error_exit("--family a,b trains in one process; start it without torchrun", 2)
        settings = settings.for_family(families[0]) if len(families) == 1 else settings
    from rich.table import Table

    from pipelines.logs import configure_logging
    from pipelines.training.command import reproduce as reproduce_run
    from pipelines.training.command import train_and_export

    configure_logging()
    out = out_dir or settings.runs_dir / "train"
    if reproduce is not None:
        report, compared = reproduce_run(reproduce, out, settings)
        table = Table("", f"run {reproduce}", f"reproduced ({report.run_id})", "same")
        for name, (then, now) in compared.items():
            table.add_row(name, then, now, "yes" if then == now else "[bold red]NO[/]")
        console.print(table)
        if any(then != now for then, now in compared.values()):
            _error_exit("the reproduced run differs from the original", 1)
        return
    checkpoints = checkpoint_dir or settings.resolved_checkpoint_dir
    if len(families) > 1:
        _compare(paths, families, out, checkpoints, settings, search)
        return
    params = None
    if search:
        from pipelines.training.command import new_run
        from pipelines.training.search import search as run_search

        run_id = run_id or new_run(settings, {"entry": "mlops train --search"},
                                   run_name=f"train {settings.model_family}")
        tuned = run_search(paths, search, settings, run_id)
        settings, params = tuned.settings, tuned.params
    result = train_and_export(paths, out, checkpoints, settings, run_id=run_id, params=params)
    if result is not None:
        metrics = ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.items() if k in _SHOWN_METRICS)
        console.print(f"run {result.run_id}: {metrics}; ONNX {result.onnx_path} (sha256 {result.onnx_sha256[:12]})")


_SHOWN_METRICS = ("test_f1", "test_pr_auc", "test_brier", "test_ece")


def _compare(paths: dict[str, Path], families: list[str], out: Path, checkpoints: str, settings: PipelineSettings,
             search: int) -> None:
    """Several families on the same splits: a table of their validation PR-AUC, the best registered."""
    from rich.table import Table

    from pipelines.training.compare import compare_families

    comparison = compare_families(paths, families, out, checkpoints, settings, search_trials=search)
    table = Table("family", "validation PR-AUC", "chosen", "run")
    for run in comparison.runs:
        chosen = run is comparison.chosen
        table.add_row(run.family, f"{run.val_pr_auc:.4f}", "[bold green]yes[/]" if chosen else "", run.run_id)
    console.print(table)
    report = comparison.report
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in report.metrics.items() if k in _SHOWN_METRICS)
    console.print(f"registered {settings.model_name} version {comparison.version}: {comparison.chosen.family}, "
                  f"run {report.run_id} (under {comparison.parent_run_id}): {metrics}; ONNX {report.onnx_path}")
