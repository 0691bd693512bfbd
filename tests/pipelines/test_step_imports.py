"""A kfp.local step process imports only what its step uses: each heavy library costs seconds per
step per pipeline run (measured here: Feast 7-13 s, Great Expectations ~10 s, torch ~4 s, scikit-learn ~2 s)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

HEAVY = ("torch", "great_expectations", "feast", "sklearn")


def test_the_ingest_and_deploy_steps_load_no_training_or_feature_library() -> None:
    # What the ingest and deploy components import (pipelines/components.py) and deploy's own module;
    # then the evaluate step's module, which does need scikit-learn: the check sees an import.
    code = ("import json, sys\n"
            f"def heavy(): return [m for m in {HEAVY!r} if m in sys.modules]\n"
            "import pipelines.orchestration.tasks, pipelines.steps.deploy\n"
            "before = heavy()\n"
            "import pipelines.steps.evaluate\n"
            "print(json.dumps([before, heavy()]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    ingest_and_deploy, with_evaluate = json.loads(result.stdout.strip().splitlines()[-1])
    assert ingest_and_deploy == []
    assert with_evaluate == ["sklearn"]
