"""Some libraries import a heavy optional dependency only to probe for it: Feast imports torch (2.8 s of
CPU) to offer ``to_tensor``, pyarrow imports pandas (36 MB resident) to ask whether what it converts is
a pandas object. :func:`hidden` makes such a probe see the dependency as absent, once, while a later
import in the same process loads it as usual.

A finder at the head of ``sys.meta_path`` refuses the name, rather than ``None`` in ``sys.modules``:
compiled (Cython) modules read a ``None`` entry as the module itself, not as "absent".
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Iterator
from contextlib import contextmanager


class _Refusing(importlib.abc.MetaPathFinder):
    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"{name} is hidden for this import", name=name)


@contextmanager
def hidden(*names: str) -> Iterator[None]:
    """Imports of ``names`` (and their submodules) fail inside the block, unless already loaded."""
    refused = frozenset(name for name in names if name not in sys.modules)
    finder = _Refusing(refused)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
