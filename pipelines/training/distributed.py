"""Process-group plumbing for training: alone, or one process per device under ``torchrun``.

torchrun sets RANK, LOCAL_RANK and WORLD_SIZE; without them this is a world of one and no process
group is created. GPUs use NCCL and the device LOCAL_RANK names; CPUs use gloo.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rank:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0 alone logs, checkpoints and writes the trained model."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def pick_device(requested: str, local_rank: int = 0) -> torch.device:
    """CUDA device ``local_rank`` when asked for (or auto) and present, else the CPU."""
    if requested != "cpu" and torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    if requested == "cuda":
        log.warning("device=cuda requested but CUDA is not available; training on cpu")
    return torch.device("cpu")


def start(requested_device: str) -> Rank:
    """Join the process group torchrun describes (if any) and pick this rank's device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(requested_device, local_rank)
    if world_size > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    log.info("rank %d/%d (local %d) training on %s", rank, world_size, local_rank, device)
    return Rank(rank=rank, local_rank=local_rank, world_size=world_size, device=device)


def stop(rank: Rank) -> None:
    if rank.distributed and dist.is_initialized():
        dist.destroy_process_group()


def any_rank(flag: bool, rank: Rank) -> bool:
    """True on every rank when ``flag`` is true on at least one (so all ranks stop at the same step)."""
    if not rank.distributed:
        return flag
    value = torch.tensor([1.0 if flag else 0.0], device=rank.device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item() > 0)


def sum_over_ranks(values: list[float], rank: Rank) -> list[float]:
    if not rank.distributed:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=rank.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return [float(v) for v in tensor.tolist()]


def shard(order: torch.Tensor, rank: Rank) -> torch.Tensor:
    """This rank's share of one epoch's permutation: every world_size-th index, padded to equal length.

    Ranks take interleaved indices, so step k of all ranks together covers exactly the samples step k
    of a single process covers (with the per-rank batch = global batch / world size).
    """
    if not rank.distributed:
        return order
    remainder = len(order) % rank.world_size
    if remainder:  # every rank must run the same number of steps or the gradient all-reduce hangs
        order = torch.cat([order, order[: rank.world_size - remainder]])
    return order[rank.rank:: rank.world_size]
