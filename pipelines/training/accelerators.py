"""What the train step asks the cluster for: N whole GPUs or one MIG slice.

Applied to the ``train`` task where the pipeline is assembled (the Kubernetes settings of issue 10
add tolerations, node selector and queue label beside it). With several GPUs in one pod the step
runs torchrun over them (pipelines.training.entry.launch_on_local_gpus); more than one node is a
gang-scheduled job of its own running the same entry point.
"""

from __future__ import annotations

import re

from kfp.dsl import PipelineTask

from mlops.errors import ConfigError

WHOLE_GPU = "nvidia.com/gpu"
_MIG_PROFILE = re.compile(r"^\d+g\.\d+gb$")  # e.g. 1g.10gb, 3g.40gb (GPU Operator, mixed strategy)


def request_gpus(task: PipelineTask, gpus: int, mig_profile: str | None = None) -> PipelineTask:
    """``gpus`` whole GPUs, or (with ``mig_profile``) one MIG slice; 0 and no profile leaves the task on CPUs."""
    if gpus < 0:
        raise ConfigError(f"GPU count must be 0 or more, got {gpus}")
    if mig_profile is not None:
        if not _MIG_PROFILE.match(mig_profile):
            raise ConfigError(f"MIG profile {mig_profile!r} is not like '1g.10gb'")
        if gpus > 1:
            raise ConfigError("a task gets one MIG slice; ask for whole GPUs to train on several")
        return task.set_accelerator_type(f"nvidia.com/mig-{mig_profile}").set_accelerator_limit(1)
    if gpus == 0:
        return task
    return task.set_accelerator_type(WHOLE_GPU).set_accelerator_limit(gpus)
