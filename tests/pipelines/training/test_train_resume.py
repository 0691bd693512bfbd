"""Preemption: SIGTERM mid-epoch checkpoints and exits 143; the rerun resumes to the same weights, bit for bit."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from mlops.contract import DataContract
from mlops.errors import TrainingError
from pipelines.settings import PipelineSettings
from pipelines.splits import split_paths
from pipelines.training.checkpoint import PREEMPTED_EXIT_CODE, CheckpointStore
from pipelines.training.entry import run_training
from pipelines.training.trainer import Checkpointing, TrainParams, train_model

pytestmark = pytest.mark.integration

Splits = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]
# Small batches make an epoch long enough (about 70 steps) for the signal to land inside it.
ENV = {"MLOPS_MAX_EPOCHS": "2", "MLOPS_PATIENCE": "10", "MLOPS_BATCH_SIZE": "32", "MLOPS_DEVICE": "cpu",
       "MLOPS_SEED": "5"}
PREEMPTED = re.compile(r"SIGTERM: checkpointed at epoch (\d+) step (\d+)/(\d+) \(global step (\d+)\)")


def _command(data_dir: Path, out_dir: Path, checkpoints: Path) -> list[str]:
    return [sys.executable, "-m", "pipelines.training.entry", "--data-dir", str(data_dir), "--out-dir", str(out_dir),
            "--checkpoint-dir", str(checkpoints)]


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, **ENV, "MLOPS_HOME": str(home)}


def _weights(out_dir: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = torch.load(out_dir / "model.pt", weights_only=True)["state_dict"]
    return state


@pytest.mark.timeout(300)
def test_sigterm_mid_epoch_then_resume_gives_bitwise_same_weights(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _env(tmp_path / "home")
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    # The uninterrupted run in this process (same code, same thread count), the interrupted one as a real process.
    run_training(split_paths(data_dir), tmp_path / "straight", str(tmp_path / "ckpt-straight"),
                 settings=PipelineSettings(home=tmp_path / "home"))

    interrupted_out, checkpoints = tmp_path / "interrupted", tmp_path / "ckpt"
    proc = subprocess.Popen(_command(data_dir, interrupted_out, checkpoints), env=env, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stderr is not None
    with proc.stderr:
        for line in proc.stderr:  # wait until epoch 1 is done, then preempt during epoch 2
            if "epoch 1/2" in line:
                proc.send_signal(signal.SIGTERM)
                break
        stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == PREEMPTED_EXIT_CODE, stderr[-2000:]
    match = PREEMPTED.search(stderr)
    assert match is not None, stderr[-2000:]
    epoch, step, steps, global_step = (int(g) for g in match.groups())
    assert epoch == 2
    assert 1 <= step <= steps
    assert global_step == steps + step  # all of epoch 1, then epoch 2 up to the signal
    assert not (interrupted_out / "model.pt").exists()
    # The newest checkpoint is the one written at the signal, named by its global step.
    assert max(path.name for path in checkpoints.rglob("ckpt-*.pt")) == f"ckpt-{global_step:010d}.pt"

    resumed = subprocess.run(_command(data_dir, interrupted_out, checkpoints), env=env, capture_output=True,
                             text=True, timeout=240, check=False)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resumed at epoch {epoch} step {step}" in resumed.stderr

    expected, actual = _weights(tmp_path / "straight"), _weights(interrupted_out)
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name


def test_checkpoint_of_other_settings_is_refused(splits: Splits, contract: DataContract, tmp_path: Path) -> None:
    params = TrainParams.from_settings(PipelineSettings(seed=1, max_epochs=1, device="cpu"))
    store = CheckpointStore(str(tmp_path / "ckpt"))
    train_model(splits[0], splits[1], contract, params, checkpointing=Checkpointing(store, "a" * 64))
    with pytest.raises(TrainingError, match="another --checkpoint-dir"):
        train_model(splits[0], splits[1], contract, params, checkpointing=Checkpointing(store, "b" * 64))


def test_store_keeps_the_newest_two_and_reads_the_newest(tmp_path: Path) -> None:
    store = CheckpointStore(f"file://{tmp_path}/nested/ckpt")  # an fsspec URL, not only a path
    assert store.latest() is None
    for step in (3, 10, 7):
        store.save(step, {"step": step, "weights": torch.full((2,), float(step))})
    assert sorted(p.name for p in (tmp_path / "nested" / "ckpt").iterdir()) == [
        "ckpt-0000000007.pt", "ckpt-0000000010.pt"]
    latest = store.latest()
    assert latest is not None
    assert latest["step"] == 10
    assert torch.equal(latest["weights"], torch.full((2,), 10.0))
