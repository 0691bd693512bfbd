"""Fixtures shared by every test folder."""

from __future__ import annotations

import atexit
import copy
import gc
import sys
import warnings
from typing import TYPE_CHECKING, Any

import pytest

from mlops.contract import DataContract, load_contract
from mlops.settings import BUNDLED_CONTRACT

if TYPE_CHECKING:
    from infra.schemas import SchemaValidator

# Traffic, reference profiles and registered versions for the monitoring tests.
pytest_plugins = ["monitoring_fixtures"]


@pytest.fixture(scope="session")
def contract() -> DataContract:
    """The bundled example contract (card transactions)."""
    return load_contract(BUNDLED_CONTRACT)




def _close_metric_files() -> None:
    # feast switches prometheus_client to multiprocess mode, whose mmap files are never closed;
    # at interpreter exit they would print ResourceWarnings after pytest's summary line.
    mmap_dict = sys.modules.get("prometheus_client.mmap_dict")
    if mmap_dict is None:
        return
    with warnings.catch_warnings():
        # isinstance() touches every live object; some (torch's lazy aliases) warn when touched.
        warnings.simplefilter("ignore")
        open_files = [obj for obj in gc.get_objects() if isinstance(obj, mmap_dict.MmapedDict)]
    for metric_file in open_files:
        metric_file.close()


atexit.register(_close_metric_files)


# --- infra/: the kustomize overlays built once per session (kubectl kustomize, offline) ---

@pytest.fixture(scope="session")
def built() -> dict[str, list[dict[str, Any]]]:
    from infra.manifests import OVERLAYS, build_overlay

    return {name: build_overlay(name) for name in OVERLAYS}


@pytest.fixture
def prod(built: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A private copy of the prod overlay's objects, free to mutate."""
    return copy.deepcopy(built["prod"])


@pytest.fixture(scope="session")
def validator() -> SchemaValidator:
    from infra.manifests import DEFAULT_CRD_DIR
    from infra.schemas import SchemaValidator

    return SchemaValidator(DEFAULT_CRD_DIR)
