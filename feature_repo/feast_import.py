"""Feast, imported without typeguard instrumenting its classes.

Feast decorates its public classes with typeguard's ``@typechecked``, which parses, rewrites and
compiles each class's source again on every import: about half of ``import feast``'s CPU (6.6 s ->
3.4 s here), paid by every pipeline step, job and service that opens the store. The checks it buys
are Feast's own argument checks at run time, on calls this package makes with its own values (and
mypy checks); the same objects are built either way.

Feast also imports torch while it loads, if installed (2.8 s of CPU here), only to offer
``to_tensor`` on its responses, which this package never asks for. Unless torch is loaded already,
the import sees it as absent (Feast then raises, only if ``to_tensor`` is called), and a later
``import torch`` in the same process loads it as usual.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from mlops.hidden_imports import hidden

_lock = threading.Lock()


def _unchecked(target: Any = None, **_options: Any) -> Any:
    """typeguard's ``typechecked`` that instruments nothing, with or without its options."""
    return target if target is not None else _unchecked


def import_feast() -> None:
    """Import ``feast`` once per process with typeguard's decorator switched off meanwhile, and torch
    hidden from it unless loaded already."""
    if "feast" in sys.modules:
        return
    import typeguard

    with _lock, hidden("torch"):
        checked = typeguard.typechecked
        typeguard.typechecked = _unchecked
        try:
            import feast  # noqa: F401  (its modules bind the decorator as they load)
        finally:
            typeguard.typechecked = checked
