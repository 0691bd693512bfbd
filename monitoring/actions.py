"""What a drift verdict does, and the record of it.

INFO logs; WARNING alerts (the level is exported, Prometheus' FeatureDriftWarning rule fires);
CRITICAL switches the service to the ``fallback`` alias through its authenticated admin API and
starts a retraining run on the freshest labelled data. A CRITICAL verdict inside the cool-down
of the last CRITICAL action does nothing more. Every run of the job is recorded (what, why,
which scores) in ``<home>/monitoring/drift_history.jsonl``, shown by ``mlops drift history``.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict

from mlops.errors import AdminActionError
from monitoring.drift import Level
from monitoring.estimated_quality import EstimatedQuality

log = logging.getLogger(__name__)
HISTORY_FILE = "drift_history.jsonl"
ACTING = "fallback"


class DriftRunRecord(BaseModel):
    """One run of the drift job: its verdict, why, the scores behind it, and what it did."""

    model_config = ConfigDict(extra="forbid")

    run_at: datetime
    window: str
    model_name: str
    model_versions: list[str]
    rows: int
    level: Level
    reason: str
    scores: dict[str, float]
    actions: list[str]
    action_errors: list[str] = []
    report_paths: list[str] = []
    worst: list[str] = []  # the most severe features, most severe first
    estimates: list[EstimatedQuality] = []  # the quality expected without labels, per version and role
    retraining_data: str | None = None
    retraining_log: str | None = None
    retraining_pid: int | None = None


def history_path(monitoring_dir: Path) -> Path:
    return monitoring_dir / HISTORY_FILE


def read_history(monitoring_dir: Path) -> list[DriftRunRecord]:
    path = history_path(monitoring_dir)
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [DriftRunRecord.model_validate(json.loads(line)) for line in lines if line.strip()]


def append_history(monitoring_dir: Path, record: DriftRunRecord) -> None:
    monitoring_dir.mkdir(parents=True, exist_ok=True)
    with history_path(monitoring_dir).open("a", encoding="utf-8") as handle:
        handle.write(record.model_dump_json() + "\n")


def cooldown_until(history: list[DriftRunRecord], cooldown: timedelta) -> datetime | None:
    """When the last fallback switch's cool-down ends (None when there was none)."""
    acted = [r.run_at for r in history if ACTING in r.actions]
    return max(acted) + cooldown if acted else None


def planned_actions(level: Level, history: list[DriftRunRecord], now: datetime, cooldown: timedelta,
                    *, retrain: bool) -> list[str]:
    if level == "INFO":
        return ["log"]
    if level == "WARNING":
        return ["alert"]
    until = cooldown_until(history, cooldown)
    if until is not None and now < until:
        return [f"none: cool-down until {until.isoformat()}"]
    return [ACTING, "retrain"] if retrain else [ACTING]


def switch_to_fallback(service_url: str, token: str | None, reason: str, *, dev_mode: bool = False,
                       timeout_s: float = 10.0) -> str:
    """POST /admin/fallback; returns the service's answer, AdminActionError otherwise.

    The same rule as the service's admin routes: with a token configured it is sent; without one
    only dev mode may call (the service's admin API is open there), anywhere else it is refused.
    """
    if not token and not dev_mode:
        raise AdminActionError("no admin token: set MLOPS_ADMIN_TOKEN to let the drift job switch to fallback "
                               "(only dev mode calls the admin API without one)")
    url = f"{service_url}/admin/fallback"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.post(url, json={"reason": reason}, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise AdminActionError(f"cannot reach {url}: {exc}") from exc
    if response.status_code >= 300:
        raise AdminActionError(f"{url} answered {response.status_code}: {response.text[:300]}")
    log.warning("switched serving to the fallback alias: %s", reason)
    return response.text
