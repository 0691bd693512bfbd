"""mlops.hidden_imports: inside the block an import of a hidden module (or a submodule) fails as for an
absent one; after it the module imports as usual; a module loaded already is never refused."""

from __future__ import annotations

import importlib
import sys

import pytest

from mlops.hidden_imports import hidden

pytestmark = pytest.mark.unit


def test_a_hidden_module_is_absent_inside_the_block_and_imports_after_it() -> None:
    sys.modules.pop("wave", None)
    with hidden("wave"), pytest.raises(ModuleNotFoundError, match="wave is hidden"):
        importlib.import_module("wave")
    assert importlib.import_module("wave").__name__ == "wave"


def test_a_submodule_of_a_hidden_package_is_absent_too() -> None:
    sys.modules.pop("xmlrpc.client", None)
    sys.modules.pop("xmlrpc", None)
    with hidden("xmlrpc"), pytest.raises(ModuleNotFoundError):
        importlib.import_module("xmlrpc.client")
    assert importlib.import_module("xmlrpc.client").__name__ == "xmlrpc.client"


def test_a_module_loaded_already_is_not_refused() -> None:
    import json

    with hidden("json"):
        assert importlib.import_module("json") is json
    assert not any(type(finder).__name__ == "_Refusing" for finder in sys.meta_path)
