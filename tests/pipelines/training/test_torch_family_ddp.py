"""The platform's loop under torchrun (2 gloo ranks on the CPU), on a user's module (the ``torch`` family):
it trains data-parallel, rank 0 alone checkpoints, writes, exports and logs, one logger's metrics, and
the test F1 within 0.01 of one process on the same splits and settings. The built-in MLP is the same
loop (LoopFamily, train_model) with the platform's network: one torchrun run covers both."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlops import registry
from mlops_cli.app import app
from pipelines.settings import PipelineSettings
from pipelines.training.trained_model import read_summary

pytestmark = pytest.mark.integration

USER_NETS = Path(__file__).parent  # where user_nets.py lives: importable by every rank and by export


USER_MODULE = {"module": "user_nets:Wide", "hidden": 8}
# The same batches on one rank and on two (see pipelines/training/distributed.shard): the F1s differ only by
# floating-point summation order, not by sampling noise on a small test split.
LOOP = {"MLOPS_MODEL_FAMILY": "torch", "MLOPS_MODEL_PARAMS": json.dumps(USER_MODULE), "MLOPS_MAX_EPOCHS": "3",
        "MLOPS_PATIENCE": "10", "MLOPS_SEED": "3", "MLOPS_BATCH_SIZE": "256", "MLOPS_DEVICE": "cpu"}
RUN_LINE = re.compile(r"run ([0-9a-f]{32}):")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.timeout(400)
def test_two_ranks_train_a_user_module_and_rank0_alone_writes_it(
        settings: PipelineSettings, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(USER_NETS))
    for key, value in LOOP.items():
        monkeypatch.setenv(key, value)
    single = CliRunner().invoke(app, ["train", "--data-dir", str(data_dir), "--out-dir", str(tmp_path / "single")])
    assert single.exit_code == 0, single.output
    single_run = RUN_LINE.search(single.output)
    assert single_run is not None, single.output

    client = registry.client(settings)
    run_id = client.create_run(registry.ensure_experiment(settings)).info.run_id
    out_dir = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MLOPS_CHECKPOINT_INTERVAL_S": "0.01",
           "PYTHONPATH": os.pathsep.join([str(USER_NETS), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "mlops_cli", "train",
               "--data-dir", str(data_dir), "--out-dir", str(out_dir), "--run-id", run_id]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=360, check=False)
    log = done.stderr + done.stdout
    assert done.returncode == 0, log[-3000:]
    assert "rank 1/2" in log  # both ranks trained
    assert log.count("rank 0 wrote") == 1
    assert log.count("exported ") == 1
    steps = re.findall(r"checkpoint at step (\d+)", log)
    assert steps
    assert len(steps) == len(set(steps))  # each checkpoint written once: by rank 0
    assert read_summary(out_dir).family == "torch"
    run = client.get_run(run_id)
    assert run.data.params["world_size"] == "2"
    assert (run.data.params["model_family"], run.data.params["model_architecture"]) == ("torch", "user_nets:Wide")
    assert json.loads(run.data.params["model_params"]) == USER_MODULE
    assert run.data.params["calibration"] in ("none", "platt", "isotonic")
    assert run.data.metrics["export_max_abs_diff"] <= 1e-5
    epochs = int(run.data.params["epochs_run"])
    assert len(client.get_metric_history(run_id, "val_pr_auc")) == epochs  # one logger, not two
    assert len(client.get_metric_history(run_id, "test_f1")) == 1
    assert run.data.tags["onnx_sha256"] == _sha256(out_dir / "onnx" / "model.onnx")  # rank 0's export, logged
    single_f1 = client.get_run(single_run.group(1)).data.metrics["test_f1"]
    assert single_f1 > 0.5  # a model that learned: equal F1s of two that did not would prove nothing
    assert abs(run.data.metrics["test_f1"] - single_f1) <= 0.01
