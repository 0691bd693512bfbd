"""The three split files a training run reads, found without importing torch or pandas (the CLI
checks them before it loads the trainer)."""

from __future__ import annotations

from pathlib import Path

from mlops.errors import InputError

SPLITS = ("train", "validation", "test")  # the file names preprocess writes


def split_paths(data_dir: Path) -> dict[str, Path]:
    """The three split files of ``data_dir``; a missing one is bad input, named."""
    paths = {name: Path(data_dir) / f"{name}.parquet" for name in SPLITS}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise InputError(f"--data-dir {data_dir} lacks split files: {', '.join(missing)}")
    return paths
