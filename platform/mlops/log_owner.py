"""Which tracking store a home's prediction log belongs to: ``<home>/predictions/store.json``.

A version number means something only in its registry: version 3 of the embedded store and version
3 of a tracking server are different models. The first prediction service started on a home claims
its log for its tracking store; a service or a job of another store on the same home is refused in
one line (ConfigError, exit code 2) rather than answering among the other store's predictions or
judging them. So every record of a log, and every version number in it, is named by the store in
``store.json`` (the drift and canary reports print it).

The home's own SQLite store is named by its place inside the home, so a home reached through a
symlink, or copied (and re-pointed by ``mlops init``), is still its own; any other store by its URI
without credentials. A log written before the claim existed is claimed by the next service.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from urllib.parse import urlsplit

from mlops.errors import ConfigError
from mlops.settings import Settings

CLAIM_FILE = "store.json"
_HOME_STORE = "home:"  # prefix of a store inside the home: "home:mlflow.db"
_SQLITE = "sqlite:///"


def registry_identity(tracking_uri: str) -> str:
    """The tracking URI without user and password: the same store whatever credentials reach it."""
    netloc = urlsplit(tracking_uri).netloc
    if "@" not in netloc:
        return tracking_uri  # untouched: urlunsplit would rewrite sqlite:////abs/path
    return tracking_uri.replace(netloc, netloc.rsplit("@", 1)[1], 1)


def store_identity(settings: Settings) -> str:
    """The name of the settings' tracking store as a log's claim records it."""
    uri = settings.resolved_tracking_uri
    if not uri.startswith(_SQLITE):
        return registry_identity(uri)
    database = Path(uri.removeprefix(_SQLITE).split("?", 1)[0]).resolve()
    home = settings.resolved_home.resolve()
    if database.is_relative_to(home):
        return _HOME_STORE + database.relative_to(home).as_posix()
    return _SQLITE + database.as_posix()


def describe_store(identity: str) -> str:
    """An identity as a person reads it."""
    if identity.startswith(_HOME_STORE):
        return f"the home's own store ({identity.removeprefix(_HOME_STORE)})"
    return identity


def log_owner(directory: Path) -> str | None:
    """The store that claimed the log in ``directory``; None while unclaimed."""
    path = directory / CLAIM_FILE
    try:
        claim = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} cannot be read ({exc.__class__.__name__}): it names the tracking store the "
                          "prediction log belongs to; restore it, or delete it to let the next service claim "
                          "the log") from exc
    store = claim.get("store") if isinstance(claim, dict) else None
    if not isinstance(store, str) or not store:
        raise ConfigError(f"{path} names no tracking store (expected {{\"store\": ...}}); restore it, or delete it "
                          "to let the next service claim the log")
    return store


def check_owner(settings: Settings, directory: Path) -> None:
    """ConfigError (one line) when the log in ``directory`` belongs to another store than the settings'."""
    owner = log_owner(directory)
    if owner is None:
        return
    mine = store_identity(settings)
    if owner != mine:
        raise ConfigError(f"the prediction log {directory} belongs to {describe_store(owner)}, these settings use "
                          f"{describe_store(mine)}: a home's predictions belong to one tracking store; give this "
                          "store a home of its own (MLOPS_HOME)")


def claim_log(settings: Settings, directory: Path) -> str:
    """Claim the log in ``directory`` for the settings' store (first service wins); returns the store.

    The claim is written beside and linked into place, so of two replicas starting at once one
    claims and the other reads that claim, whole.
    """
    mine = store_identity(settings)
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{CLAIM_FILE}.{os.getpid()}"
    partial.write_text(json.dumps({"store": mine}) + "\n", encoding="utf-8")
    try:
        os.link(partial, directory / CLAIM_FILE)
    except FileExistsError:
        check_owner(settings, directory)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return mine
