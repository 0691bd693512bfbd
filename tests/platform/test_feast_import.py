"""Feast imported through feature_repo.feast_import: its classes are not rewritten by typeguard, the
decorator is typeguard's own again afterwards, torch is not loaded on Feast's account (and loads when
asked for later), and the store still opens and applies the definitions."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration  # a fresh process: feast must not be imported yet

PROBE = """
import typeguard
checked = typeguard.typechecked
from feature_repo.feast_import import import_feast
import_feast()
import feast.data_source
assert typeguard.typechecked is checked, "typeguard's decorator not restored"
names = feast.data_source.PushSource.__init__.__code__.co_names
print("instrumented" if "check_argument_types_internal" in names else "plain")
import sys
print("torch-loaded" if "torch" in sys.modules else "no-torch")
import torch
assert torch.tensor([1.0, 2.0]).sum().item() == 3.0
"""


def test_feast_classes_load_without_typeguards_rewrite_and_the_decorator_is_restored() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["plain", "no-torch"]


def test_a_plain_import_is_what_the_probe_tells_apart() -> None:
    # The same probe without import_feast sees typeguard's rewrite: the check above can fail.
    plain = PROBE.replace("import_feast()\n", "")
    done = subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["instrumented", "torch-loaded"]
