"""What a gate reports: one line saying what it checked, the figures, PASS/FAIL/SKIP and why."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Status = Literal["PASS", "FAIL", "SKIP"]


@dataclass(frozen=True)
class GateOutcome:
    gate: str
    status: Status
    checked: str  # what the gate looked at, with its figures
    reason: str = ""  # why it failed or was skipped; empty on PASS
    log: Path | None = None  # the full output of a delegated command, kept for a failure's details
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status == "FAIL"

    def line(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        return f"{self.gate:<12} {self.status} {self.checked}{why} ({self.seconds:.1f} s)"


def passed(gate: str, checked: str) -> GateOutcome:
    return GateOutcome(gate, "PASS", checked)


def failed(gate: str, checked: str, reason: str, log: Path | None = None) -> GateOutcome:
    return GateOutcome(gate, "FAIL", checked, reason, log)


def skipped(gate: str, checked: str, reason: str) -> GateOutcome:
    return GateOutcome(gate, "SKIP", checked, reason)
