"""The estimate's guard: calibration re-checked whenever late labels are joined.

Quality estimated without labels is only as good as the probabilities' calibration. The quality job
measures the expected calibration error of each version's labelled predictions (ECE: over ten
equal-width probability bins, the row-weighted gap between the mean predicted probability and the
observed positive rate, as training and evaluate measure it, ``mlops.calibration``) and stores the
latest per version in ``<home>/monitoring/calibration_checks.json``; the drift job then distrusts the
estimate of a version whose latest check exceeded the limit. Fewer labelled predictions than the
minimum give no verdict: ECE on a few dozen labels is mostly noise.

Each check also refits the version's score map (mlops.score_map) on its labelled predictions, and
the drift job estimates through that map rather than the one read off the evaluate step's held-out
split: a few dozen frauds there (73 in the demo) set a calibration every later window shares, while
the labelled traffic grows with every delivery (on the demo's model the estimated F1 went from 0 to
19 of 19 windows inside its interval, docs/monitoring-estimated-quality.md).

Two quality jobs may save at once (two CronJob pods, a shell beside the schedule): the read, merge
and write of the file happen under a lock beside it (``calibration_checks.json.lock``), so neither
loses the other's versions, and the file is replaced by a rename, so a reader never sees half of it.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict

from mlops.calibration import calibration_report
from mlops.run_lock import waiting_lock
from mlops.score_map import ScoreMap, fit_score_map
from monitoring.labels import LABEL

CHECKS_FILE = "calibration_checks.json"


class CalibrationCheck(BaseModel):
    """The calibration of one version's labelled predictions, as last measured."""

    model_config = ConfigDict(extra="forbid")

    model_version: str
    checked_at: datetime
    labelled: int
    ece: float
    # Refitted on the labelled predictions; None with too few of a class (and in checks stored before maps).
    score_map: ScoreMap | None = None

    def unreliable(self, limit: float, min_labelled: int) -> str | None:
        return unreliable(self.ece, self.labelled, limit, min_labelled)


def unreliable(ece: float, labelled: int, limit: float, min_labelled: int) -> str | None:
    """Why an estimate with this calibration cannot be trusted, or None when it can (or too few labels say)."""
    if labelled < min_labelled or ece <= limit:
        return None
    return f"ECE {ece:.3f} > {limit:g} on {labelled:,} labelled predictions"


def check_versions(labelled: pd.DataFrame, now: datetime) -> list[CalibrationCheck]:
    """ECE and score map of each version's labelled predictions (all of them in the frame, pooled over windows)."""
    checks = []
    for version, rows in labelled.groupby("model_version", sort=True):
        labels, probabilities = rows[LABEL].to_numpy(), rows["probability"].to_numpy(dtype="float64")
        checks.append(CalibrationCheck(model_version=str(version), checked_at=now, labelled=len(rows),
                                       ece=calibration_report(labels, probabilities).ece,
                                       score_map=fit_score_map(probabilities, labels)))
    return checks


def read_checks(monitoring_dir: Path) -> dict[str, CalibrationCheck]:
    path = monitoring_dir / CHECKS_FILE
    if not path.exists():
        return {}
    stored = json.loads(path.read_text(encoding="utf-8"))
    return {version: CalibrationCheck.model_validate(check) for version, check in stored.items()}


def save_checks(monitoring_dir: Path, checks: list[CalibrationCheck]) -> None:
    """The new checks replace the stored ones of their versions; other versions' checks stay, whoever
    else saves at the same time (the read-merge-write holds the file's lock)."""
    path = monitoring_dir / CHECKS_FILE
    with waiting_lock(path.with_name(CHECKS_FILE + ".lock")):
        merged = read_checks(monitoring_dir) | {check.model_version: check for check in checks}
        text = json.dumps({version: check.model_dump(mode="json") for version, check in sorted(merged.items())},
                          indent=2)
        descriptor, temporary = tempfile.mkstemp(dir=monitoring_dir, prefix=f".{CHECKS_FILE}.", suffix=".tmp")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as written:
                os.fchmod(written.fileno(), 0o644)  # as readable as before (mkstemp makes it 0600)
                written.write(text)
                written.flush()
                os.fsync(written.fileno())
            os.replace(temporary, path)  # the drift job reads it meanwhile: never half a file
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
