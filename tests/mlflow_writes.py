"""Counting MLflow's process-wide writes (the URI setters and MLFLOW_* variables) while the real ones run."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest


@dataclass
class MlflowGlobalWrites:
    uri_calls: Counter[str] = field(default_factory=Counter)  # set_tracking_uri / set_registry_uri
    env_writes: Counter[str] = field(default_factory=Counter)  # by variable name

    @property
    def most(self) -> int:
        """The most times any one of them was written."""
        return max([0, *self.uri_calls.values(), *self.env_writes.values()])


def count_global_writes(monkeypatch: pytest.MonkeyPatch) -> MlflowGlobalWrites:
    """Wrap the setters and os.environ's item assignment until ``monkeypatch`` undoes it."""
    import mlflow
    import mlflow.tracking
    from mlflow.tracking import _model_registry, _tracking_service

    writes = MlflowGlobalWrites()
    for name in ("set_tracking_uri", "set_registry_uri"):
        original = getattr(mlflow, name)

        def counted(uri: str | None, _name: str = name, _original: Callable[[str | None], None] = original) -> None:
            writes.uri_calls[_name] += 1
            _original(uri)
        # Every name the setter is reachable by, so no caller slips past the count.
        for module in (mlflow, mlflow.tracking, _tracking_service.utils, _model_registry.utils):
            if getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, counted)
    set_item = os._Environ.__setitem__

    def counted_set(environ: os._Environ[str], key: str, value: str) -> None:
        if key.startswith("MLFLOW_"):
            writes.env_writes[key] += 1
        set_item(environ, key, value)
    monkeypatch.setattr(os._Environ, "__setitem__", counted_set)
    return writes
