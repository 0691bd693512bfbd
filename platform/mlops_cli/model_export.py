"""``mlops model export --format triton DIR``: a registered version as a model repository for the
servers a cluster runs (registered on the ``model`` sub-app in mlops_cli.model)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from mlops_cli.output import console, error_exit, load_settings

EXPORT_FORMATS = ("triton",)


def export_command(
    directory: Annotated[Path, typer.Argument(help="Model repository to write into (created if missing).")],
    export_format: Annotated[str, typer.Option("--format", help="Repository layout: triton.")] = "triton",
    version: Annotated[str | None, typer.Option(help="Registered version (default: the serving alias').")] = None,
    max_batch_size: Annotated[int, typer.Option(min=1, max=65536, help="Triton's max_batch_size.")] = 256,
) -> None:
    """Write a registered version as a Triton model repository: config.pbtxt and <version>/model.onnx."""
    if export_format not in EXPORT_FORMATS:
        error_exit(f"--format must be one of {', '.join(EXPORT_FORMATS)}, got {export_format!r}", 2)
    if version is not None and not version.isdigit():
        error_exit(f"--version must be a version number, got {version!r}", 2)
    if directory.exists() and not directory.is_dir():
        error_exit(f"{directory} exists and is not a folder", 2)
    from mlops import registry
    from mlops.triton_export import write_repository

    settings = load_settings()
    with tempfile.TemporaryDirectory(prefix="export-") as download:
        served = (registry.download_version(settings, version, Path(download)) if version is not None
                  else registry.download_serving_model(settings, Path(download)))
        model_dir = write_repository(served.onnx_path, directory, served.name, served.version,
                                     max_batch_size=max_batch_size)
    console.print(f"{served.name} version {served.version}: Triton repository {model_dir} "
                  f"(config.pbtxt, {served.version}/model.onnx)")
