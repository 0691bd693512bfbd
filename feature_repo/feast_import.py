"""Feast, imported without typeguard instrumenting its classes.

Feast decorates its public classes with typeguard's ``@typechecked``, which parses, rewrites and
compiles each class's source again on every import: about half of ``import feast``'s CPU (6.6 s ->
3.4 s here), paid by every pipeline step, job and service that opens the store. The checks it buys
are Feast's own argument checks at run time, on calls this package makes with its own values (and
mypy checks); the same objects are built either way.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

_lock = threading.Lock()


def _unchecked(target: Any = None, **_options: Any) -> Any:
    """typeguard's ``typechecked`` that instruments nothing, with or without its options."""
    return target if target is not None else _unchecked


def import_feast() -> None:
    """Import ``feast`` once per process with typeguard's decorator switched off meanwhile."""
    if "feast" in sys.modules:
        return
    import typeguard

    with _lock:
        checked = typeguard.typechecked
        typeguard.typechecked = _unchecked
        try:
            import feast  # noqa: F401  (its modules bind the decorator as they load)
        finally:
            typeguard.typechecked = checked
