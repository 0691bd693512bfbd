"""``mlops train``: train, export ONNX and score the test split from prepared splits (the same
train+export path as the pipeline's steps), optionally after a hyperparameter search, or reproduce a
recorded run and compare."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlops_cli.output import console
from mlops_cli.output import error_exit as _error_exit
from mlops_cli.output import load_settings as _settings


def train_command(
    data_dir: Annotated[Path | None, typer.Option(help="Folder with train/validation/test.parquet.")] = None,
    out_dir: Annotated[Path | None, typer.Option(help="Where model.pt, training.json and onnx/ go.")] = None,
    checkpoint_dir: Annotated[str | None, typer.Option(
        help="Local path or fsspec URL for checkpoints (default MLOPS_CHECKPOINT_DIR).")] = None,
    run_id: Annotated[str | None, typer.Option(help="MLflow run to log into (default: a new run).")] = None,
    reproduce: Annotated[str | None, typer.Option(help="Re-run this MLflow run from its recorded inputs.")] = None,
    search: Annotated[int, typer.Option(min=0, help="Optuna trials before training with the best.")] = 0,
) -> None:
    """Train, export ONNX and score the test split (also under torchrun); --search, --reproduce."""
    from pipelines.splits import split_paths

    if reproduce is not None and (data_dir is not None or search or run_id is not None):
        _error_exit("--reproduce takes no --data-dir, --run-id or --search: it reuses the run's inputs", 2)
    if reproduce is None and data_dir is None:
        _error_exit("--data-dir is required (or --reproduce RUN_ID)", 2)
    paths = split_paths(data_dir) if data_dir is not None else {}
    from pipelines.settings import PipelineSettings

    settings = _settings(PipelineSettings)
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
    params = None
    if search:
        from pipelines.training.command import new_run
        from pipelines.training.search import search as run_search

        run_id = run_id or new_run(settings, {"entry": "mlops train --search"})
        params = run_search(paths, search, settings, run_id)
    result = train_and_export(paths, out, checkpoints, settings, run_id=run_id, params=params)
    if result is not None:
        metrics = ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.items() if k in _SHOWN_METRICS)
        console.print(f"run {result.run_id}: {metrics}; ONNX {result.onnx_path} (sha256 {result.onnx_sha256[:12]})")


_SHOWN_METRICS = ("test_f1", "test_pr_auc", "test_brier", "test_ece")
