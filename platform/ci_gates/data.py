"""The data gate: the snapshot the newest pipeline run ingested, through the pipeline's validate step.

The snapshot is ``<home>/snapshots/<dataset_sha256>/data.parquet``; when the run trained on a time
window, the same window is applied first, so the gate judges exactly the rows that run validated.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ci_gates.outcome import GateOutcome, failed, passed
from ci_gates.runs import INGESTED, newest_run
from mlops.contract import load_contract
from mlops.errors import NotFoundError
from mlops.settings import Settings

GATE = "data"
_SHOWN_FAILURES = 4


def data_gate(settings: Settings, run_id: str | None = None) -> GateOutcome:
    """Validate the snapshot of pipeline run ``run_id`` (default: the newest) against the contract."""
    import pandas as pd

    from mlops.data.training_window import TrainingWindow, apply_window, parse_time
    from pipelines.steps.validate import check_snapshot

    run = newest_run(settings, INGESTED, run_id)
    params = run.data.params
    sha256 = params[INGESTED]
    snapshot = settings.snapshots_dir / sha256 / "data.parquet"
    if not snapshot.is_file():
        raise NotFoundError(f"pipeline run {run.info.run_id} ingested snapshot {sha256[:12]}, "
                            f"which is not under {settings.snapshots_dir}")
    contract = load_contract(settings.contract_path)
    since, until = params.get("window_since", ""), params.get("window_until", "")
    window = TrainingWindow(parse_time(since, "window_since") if since else None,
                            parse_time(until, "window_until") if until else None)
    report_dir = settings.runs_dir / "gates" / "data"
    with tempfile.TemporaryDirectory() as tmp:
        checked_file = snapshot
        if not window.is_open:
            inside, _ = apply_window(pd.read_parquet(snapshot), contract.timestamp_column, window)
            checked_file = Path(tmp) / "window.parquet"
            inside.to_parquet(checked_file, index=False)
        report = check_snapshot(checked_file, contract, report_dir)
    scope = f" in window {window.describe()}" if not window.is_open else ""
    checked = (f"snapshot {sha256[:12]} of run {run.info.run_id[:12]}: {report.rows:,} rows{scope}, "
               f"{len(report.results)} expectations of contract {contract.name!r}, {len(report.failed)} failed")
    broken = [r for r in report.results if not r.success]
    if broken:
        shown = "; ".join(f"{r.label} observed {r.observed}" for r in broken[:_SHOWN_FAILURES])
        more = f"; and {len(broken) - _SHOWN_FAILURES} more" if len(broken) > _SHOWN_FAILURES else ""
        return failed(GATE, checked, f"{shown}{more} (report: {report_dir / 'validation.html'})")
    return passed(GATE, checked)
