"""The ``torch`` family under torchrun (2 gloo ranks on the CPU): a user's module trains data-parallel in
the platform's loop, rank 0 alone checkpoints, writes, exports and logs the family, as for the MLP."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mlops import registry
from pipelines.settings import PipelineSettings
from pipelines.training.trained_model import read_summary

pytestmark = pytest.mark.integration

USER_NETS = Path(__file__).parent  # where user_nets.py lives: importable by every rank and by export


@pytest.mark.timeout(400)
def test_two_ranks_train_a_user_module_and_rank0_alone_writes_it(
        settings: PipelineSettings, data_dir: Path, tmp_path: Path) -> None:
    client = registry.client(settings)
    run_id = client.create_run(registry.ensure_experiment(settings)).info.run_id
    out_dir = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MLOPS_MODEL_FAMILY": "torch",
           "MLOPS_MODEL_PARAMS": json.dumps({"module": "user_nets:Wide", "hidden": 8}), "MLOPS_MAX_EPOCHS": "2",
           "MLOPS_DEVICE": "cpu", "MLOPS_CHECKPOINT_INTERVAL_S": "0.01",
           "PYTHONPATH": os.pathsep.join([str(USER_NETS), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "mlops_cli", "train",
               "--data-dir", str(data_dir), "--out-dir", str(out_dir), "--run-id", run_id]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=360, check=False)
    log = done.stderr + done.stdout
    assert done.returncode == 0, log[-3000:]
    assert "rank 1/2" in log
    assert log.count("rank 0 wrote") == 1
    assert log.count("exported ") == 1
    steps = re.findall(r"checkpoint at step (\d+)", log)
    assert steps
    assert len(steps) == len(set(steps))  # each checkpoint written once: by rank 0
    assert read_summary(out_dir).family == "torch"
    run = client.get_run(run_id)
    assert run.data.params["world_size"] == "2"
    assert (run.data.params["model_family"], run.data.params["model_architecture"]) == ("torch", "user_nets:Wide")
    assert json.loads(run.data.params["model_params"]) == {"module": "user_nets:Wide", "hidden": 8}
    assert run.data.params["calibration"] in ("none", "platt", "isotonic")
    assert run.data.metrics["export_max_abs_diff"] <= 1e-5
