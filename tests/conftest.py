"""Fixtures shared by every test folder."""

from __future__ import annotations

import atexit
import gc
import sys
import warnings

import pytest

from mlops.contract import DataContract, load_contract
from mlops.settings import BUNDLED_CONTRACT


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
