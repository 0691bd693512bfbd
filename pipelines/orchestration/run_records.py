"""A local run's step records, read back: what the runner reports is what the steps decided.

Every local run has its own folder, ``settings.kfp_root / <run name>``. kfp.local lays its tasks out
there as ``<kfp's run name>/<task>/``, the inline runner as ``<step>/``; either way a step's record
is the file ``record`` in its task's folder and a failed step's :class:`FailureRecord` is
``failure.json`` beside it. The MLflow run's tags say the same for people, but may be edited or
deleted there without changing what a run reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlops.settings import Settings
from pipelines.orchestration.declaration import RECORD
from pipelines.orchestration.records import FAILURE, FailureRecord, Record, read_record


@dataclass(frozen=True)
class RunRecords:
    folder: Path

    @classmethod
    def of(cls, settings: Settings, run_name: str) -> RunRecords:
        return cls(settings.kfp_root / run_name)

    def _newest(self, name: str, step: str = "*") -> Path | None:
        # Inline: <folder>/<step>/<name>; kfp.local: <folder>/<kfp run>/<step>/<name>. A run name given
        # twice holds both runs' kfp folders: the newest file is this run's.
        found = [p for p in (*self.folder.glob(f"{step}/{name}"), *self.folder.glob(f"*/{step}/{name}"))
                 if p.is_file()]
        return max(found, key=lambda p: p.stat().st_mtime_ns, default=None)

    def record(self, step: str, kind: type[Record]) -> Record | None:
        """``step``'s record, or None when the step has not written one (not run, failed, skipped)."""
        path = self._newest(RECORD, step)
        return None if path is None else read_record(path, kind)

    def failure(self) -> FailureRecord | None:
        """The failed step and why, or None when no step left a failure record."""
        path = self._newest(FAILURE)
        return None if path is None else read_record(path, FailureRecord)
