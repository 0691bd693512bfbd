"""Per-epoch throughput and accelerator load, logged to MLflow under ``system/`` (its System metrics tab)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SystemMetrics:
    epoch: int
    samples_per_s: float
    gpu_utilization_percent: float | None = None
    gpu_memory_peak_mb: float | None = None

    def as_metrics(self) -> dict[str, float]:
        values = {"system/train_samples_per_s": self.samples_per_s,
                  "system/gpu_utilization_percent": self.gpu_utilization_percent,
                  "system/gpu_memory_peak_mb": self.gpu_memory_peak_mb}
        return {k: v for k, v in values.items() if v is not None}


def _utilization(device: torch.device) -> float | None:
    try:  # torch asks NVML (pynvml) for it; without pynvml there is no reading, not an error
        return float(torch.cuda.utilization(device))
    except (ModuleNotFoundError, RuntimeError) as exc:
        log.debug("no GPU utilisation reading: %s", exc)
        return None


def device_metrics(epoch: int, samples_per_s: float, device: torch.device) -> SystemMetrics:
    """Throughput of the epoch just trained; on a GPU also its utilisation and peak memory."""
    if device.type != "cuda":
        return SystemMetrics(epoch=epoch, samples_per_s=samples_per_s)
    peak_mb = torch.cuda.max_memory_allocated(device) / 2**20
    torch.cuda.reset_peak_memory_stats(device)
    return SystemMetrics(epoch=epoch, samples_per_s=samples_per_s, gpu_utilization_percent=_utilization(device),
                         gpu_memory_peak_mb=peak_mb)
