"""Late labels: ingest by id (later labels win), bad files refused by name, quality per window and version."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import average_precision_score, f1_score, precision_score, recall_score
from typer.testing import CliRunner

from mlops.contract import DataContract
from mlops.prediction_log import PredictionLog, log_dir
from mlops_cli.app import app
from monitoring.labels import QualityRow, average_precision, ingest_labels, join_labels, quality, read_labels
from monitoring.quality_job import run_quality
from monitoring.settings import MonitoringSettings
from monitoring.window import WindowSpec, read_window

if TYPE_CHECKING:
    from served_traffic import LogWriter, Traffic

pytestmark = pytest.mark.integration

runner = CliRunner()


def test_average_precision_is_scikit_learns() -> None:
    rng = np.random.default_rng(5)
    labels = (rng.random(2_000) < 0.05).astype(int)
    scores = np.round(np.clip(rng.normal(0.2 + 0.5 * labels, 0.2), 0, 1), 2)  # rounded: many ties
    assert average_precision(labels, scores) == pytest.approx(average_precision_score(labels, scores), abs=1e-12)


def test_a_later_label_replaces_an_earlier_one(tmp_path: Path, contract: DataContract) -> None:
    first, second = tmp_path / "a.csv", tmp_path / "b.parquet"
    pd.DataFrame({"transaction_id": ["T1", "T2"], "is_fraud": [0, 0]}).to_csv(first, index=False)
    pd.DataFrame({"event_id": ["T2", "T3"], "label": [1, 1]}).to_parquet(second)
    assert ingest_labels(first, contract, tmp_path / "m") == (2, 2)
    assert ingest_labels(second, contract, tmp_path / "m") == (2, 3)
    stored = read_labels(tmp_path / "m").set_index("event_id")["label"].to_dict()
    assert stored == {"T1": 0, "T2": 1, "T3": 1}


@pytest.mark.parametrize(("content", "message"), [
    ("transaction_id,outcome\nT1,1\n", "labels need an id column"),
    ("transaction_id,is_fraud\nT1,yes\n", "labels must be 0 or 1: 1 row(s) are not, first id 'T1'"),
])
def test_bad_label_files_exit_2_naming_the_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str,
                                                   message: str) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "home"))
    path = tmp_path / "labels.csv"
    path.write_text(content)
    result = runner.invoke(app, ["labels", "ingest", str(path)])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    missing = runner.invoke(app, ["labels", "ingest", str(tmp_path / "none.csv")])
    assert missing.exit_code == 2
    assert "label file not found" in missing.output


def test_quality_per_window_and_version_matches_scikit_learn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, live: Traffic, write_log: LogWriter,
        contract: DataContract) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "home"))
    settings = MonitoringSettings()
    window = live("none").iloc[:3_000]
    champion, challenger = window.iloc[:2_000], window.iloc[2_000:]
    log = PredictionLog(log_dir(settings))
    start = datetime(2026, 3, 1, tzinfo=UTC)
    write_log(champion, log, version="1", logged_at=start)
    write_log(challenger, log, version="2", logged_at=start + timedelta(hours=1))
    labels = tmp_path / "labels.csv"
    window[[contract.id_column, contract.label_column]].to_csv(labels, index=False)
    assert runner.invoke(app, ["labels", "ingest", str(labels)]).exit_code == 0

    rows = quality(join_labels(read_window(log_dir(settings), WindowSpec()), read_labels(settings.monitoring_dir)),
                   "1h", contract.decisions.positive)
    by_version: dict[str, list[QualityRow]] = {}
    for row in rows:
        by_version.setdefault(row.model_version, []).append(row)
    assert set(by_version) == {"1", "2"}
    first = by_version["1"][0]
    part = champion.iloc[:first.labelled]
    truth, predicted = part[contract.label_column], (part["probability"] >= 0.5).astype(int)
    assert first.precision == pytest.approx(precision_score(truth, predicted, zero_division=0))
    assert first.recall == pytest.approx(recall_score(truth, predicted, zero_division=0))
    assert first.f1 == pytest.approx(f1_score(truth, predicted, zero_division=0))
    assert first.pr_auc == pytest.approx(average_precision_score(truth, part["probability"]))
    shown = runner.invoke(app, ["labels", "quality", "--window", "1h"])
    assert shown.exit_code == 0
    assert "PR-AUC" in shown.output
    assert (settings.monitoring_dir / "mlops_quality.prom").read_text().count("mlops_model_quality{") >= 4


def test_shadow_mode_quality_shows_each_role_with_its_own_figures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, live: Traffic, write_log: LogWriter,
        contract: DataContract) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "home"))
    settings = MonitoringSettings()
    window = live("none").iloc[:1_500]
    # The challenger scored the same requests in the shadow, inverted: its figures must differ.
    shadow = window.assign(probability=1.0 - window["probability"])
    log = PredictionLog(log_dir(settings))
    start = datetime(2026, 3, 1, tzinfo=UTC)
    write_log(window, log, version="1", logged_at=start)
    write_log(shadow, log, version="2", logged_at=start, role="challenger")
    write_log(window.iloc[:200], log, version="3", logged_at=start, role="canary")
    labels = tmp_path / "labels.csv"
    window[[contract.id_column, contract.label_column]].to_csv(labels, index=False)
    assert runner.invoke(app, ["labels", "ingest", str(labels)]).exit_code == 0

    rows = run_quality(settings, WindowSpec(), "1D")
    by_role = {(row.role, row.model_version): row for row in rows}
    assert set(by_role) == {("champion", "1"), ("challenger", "2"), ("canary", "3")}
    for (role, _), frame in {("champion", "1"): window, ("challenger", "2"): shadow,
                             ("canary", "3"): window.iloc[:200]}.items():
        row = next(r for r in rows if r.role == role)
        assert row.labelled == len(frame)
        assert row.pr_auc == pytest.approx(average_precision_score(frame[contract.label_column], frame["probability"]))
        assert row.f1 == pytest.approx(f1_score(frame[contract.label_column], frame["probability"] >= 0.5))
    assert by_role[("champion", "1")].pr_auc != pytest.approx(by_role[("challenger", "2")].pr_auc)
    shown = runner.invoke(app, ["labels", "quality", "--window", "1D"])
    assert shown.exit_code == 0
    assert {"champion", "challenger", "canary"} <= set(shown.output.split())
    exported = (settings.monitoring_dir / "mlops_quality.prom").read_text()
    assert 'metric="pr_auc",model_version="2",role="challenger"' in exported
