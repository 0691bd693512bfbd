"""Where the embedded MLflow store keeps its artifacts, and a copied home.

MLflow records absolute artifact locations (``file:///<home>/mlartifacts/...``) in the SQLite store.
A copied or moved home would silently read (and write) the original's artifacts, so a home whose
store names another home's artifact root is refused with one line, before MLflow is asked
anything; ``mlops init`` in the copy points its store at its own artifacts (:func:`relocate_store`).
Only the embedded store is checked: a tracking server or an explicitly named store elsewhere keeps
its own locations.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from urllib.parse import unquote, urlparse

from mlops.errors import ConfigError
from mlops.settings import Settings

# Every column of MLflow's SQLite schema that holds an artifact location.
_LOCATION_COLUMNS = (("experiments", "artifact_location"), ("runs", "artifact_uri"),
                     ("model_versions", "source"), ("model_versions", "storage_location"),
                     ("logged_models", "artifact_location"))
_ROOT_NAME = "mlartifacts"  # Settings.artifact_root's last part
_checked: set[Path] = set()


def _embedded_store(settings: Settings) -> Path | None:
    """The home's own SQLite store when the settings use it (and it exists), else None."""
    store = settings.resolved_home / "mlflow.db"
    if settings.resolved_tracking_uri != f"sqlite:///{store}" or not store.is_file():
        return None
    return store


def recorded_artifact_root(settings: Settings) -> str | None:
    """Another home's artifact root that the embedded store records, or None when it records its own."""
    store = _embedded_store(settings)
    if store is None:
        return None
    with contextlib.closing(sqlite3.connect(f"{store.as_uri()}?mode=ro", uri=True)) as connection:
        try:
            rows = connection.execute("SELECT artifact_location FROM experiments WHERE artifact_location LIKE ?",
                                      (f"file://%/{_ROOT_NAME}",)).fetchall()
        except sqlite3.DatabaseError:  # not migrated yet (an empty file): MLflow creates its tables
            return None
    others = sorted({str(location) for (location,) in rows} - {settings.artifact_root.as_uri()})
    return others[0] if others else None


def check_home_location(settings: Settings) -> None:
    """ConfigError (one line) when the embedded store keeps its artifacts in another home; once per home."""
    home = settings.resolved_home
    if home in _checked:
        return
    recorded = recorded_artifact_root(settings)
    if recorded is not None:
        original = Path(unquote(urlparse(recorded).path)).parent
        raise ConfigError(f"{home} is a copy of {original}: its MLflow store keeps its artifacts in the original; "
                          f"run `mlops init` here to point it at its own, or set MLOPS_HOME={original}")
    _checked.add(home)


def relocate_store(settings: Settings) -> str | None:
    """Point the embedded store's artifact locations at this home's own artifact root; returns the root
    it pointed at before (None: nothing to change)."""
    recorded = recorded_artifact_root(settings)
    store = _embedded_store(settings)
    if recorded is None or store is None:
        return None
    new = settings.artifact_root.as_uri()
    old_path, new_path = unquote(urlparse(recorded).path), str(settings.artifact_root)
    with contextlib.closing(sqlite3.connect(store)) as connection, connection:
        tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table, column in _LOCATION_COLUMNS:
            if table not in tables:
                continue
            for before, after in ((recorded, new), (old_path, new_path)):  # a URI, or a plain path
                # Table and column names come from _LOCATION_COLUMNS, never from input.
                connection.execute(f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                                   f"WHERE {column} = ? OR substr({column}, 1, ?) = ?",
                                   (after, len(before) + 1, before, len(before) + 1, f"{before}/"))
    _checked.discard(settings.resolved_home)
    return recorded
