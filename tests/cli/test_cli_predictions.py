"""`mlops predictions show` against a real prediction log: what was written is what is shown."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mlops.log_owner import claim_log
from mlops.prediction_log import PredictionLog, PredictionRecord, log_dir
from mlops.settings import Settings
from mlops_cli.app import app

pytestmark = pytest.mark.integration

runner = CliRunner()
NOW = datetime.now(UTC)


def _record(n: int, *, version: str, age: timedelta, probability: float, role: str = "champion") -> PredictionRecord:
    at = NOW - age
    return PredictionRecord(
        event_id=f"T{n}", event_timestamp=at, logged_at=at, entities={"customer_id": f"C{n % 3}"},
        inputs={"amount": 10.0 + n, "country": "US"}, features={"customer_txn_count_1h": float(n)},
        unknown_entities=[], unknown_categories=[], probability=probability,
        decision="fraud" if probability >= 0.5 else "legit", model_name="fraud-detector", model_version=version,
        request_id=f"r{n}", latency_s=None if role == "challenger" else 0.002 * (n + 1), role=role)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _write(home: Path, records: list[PredictionRecord]) -> None:
    log = PredictionLog(log_dir(Settings(home=home)))
    log.write(records)
    log.close()


@settings(max_examples=15, deadline=None)
@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=12))
def test_json_holds_every_answer_at_full_precision(tmp_path_factory: pytest.TempPathFactory,
                                                   probabilities: list[float]) -> None:
    home = tmp_path_factory.mktemp("predictions")
    records = [_record(n, version=str(1 + n % 2), age=timedelta(minutes=len(probabilities) - n), probability=p)
               for n, p in enumerate(probabilities)]
    _write(home, records)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLOPS_HOME", str(home))
        shown = runner.invoke(app, ["predictions", "show", "--format", "json", "--last", "0"])
        only_v2 = runner.invoke(app, ["predictions", "show", "--format", "json", "--version", "2", "--last", "0"])
    answers = json.loads(shown.stdout)
    assert [(a["event_id"], a["probability"], a["decision"], a["model_version"]) for a in answers] == [
        (r.event_id, r.probability, r.decision, r.model_version) for r in records]
    assert [a["customer_txn_count_1h"] for a in answers] == [r.features["customer_txn_count_1h"] for r in records]
    assert [a["latency_ms"] for a in answers] == pytest.approx([r.latency_s * 1000 for r in records if r.latency_s])
    assert [a["event_id"] for a in json.loads(only_v2.stdout)] == [
        r.event_id for r in records if r.model_version == "2"]


def test_since_and_last_narrow_the_window_and_csv_has_every_column(home: Path) -> None:
    _write(home, [_record(0, version="1", age=timedelta(hours=3), probability=0.9),
                  _record(1, version="1", age=timedelta(minutes=20), probability=0.2),
                  _record(2, version="1", age=timedelta(minutes=5), probability=0.7, role="challenger")])
    recent = runner.invoke(app, ["predictions", "show", "--since", "1h", "--format", "csv"])
    assert recent.exit_code == 0, recent.output
    frame = pd.read_csv(io.StringIO(recent.stdout))
    assert list(frame["event_id"]) == ["T1", "T2"]
    assert list(frame["role"]) == ["champion", "challenger"]
    assert {"amount", "country", "customer_id", "customer_txn_count_1h", "latency_ms"} <= set(frame.columns)
    newest = runner.invoke(app, ["predictions", "show", "--last", "1"])
    said = " ".join(newest.output.split())
    assert "1 answers" in said
    assert "T2" in said
    assert "T1" not in said
    assert "0.7000" in said


def test_a_version_with_no_answers_says_how_to_send_some(home: Path) -> None:
    _write(home, [_record(0, version="1", age=timedelta(minutes=1), probability=0.1)])
    result = runner.invoke(app, ["predictions", "show", "--version", "9"])
    assert result.exit_code == 0
    said = " ".join(result.output.split())
    assert "no predictions logged by version 9" in said
    assert "hint: send some" in said
    as_json = runner.invoke(app, ["predictions", "show", "--version", "9", "--format", "json"])
    assert json.loads(as_json.stdout) == []
    assert "hint: send some" in " ".join(as_json.stderr.split())


def test_the_table_is_one_line_per_answer_with_the_event_time_and_features_on_request(home: Path) -> None:
    """50 answers with a dozen features each: a header and 50 lines (the features, which once made each
    answer 17-19 lines, only with --features), each line carrying its event time."""
    records = [_record(n, version="3", age=timedelta(minutes=50 - n), probability=n / 50) for n in range(50)]
    for record in records:
        record.features.update({f"merchant_window_feature_{k}": 1.0 / (k + 1) for k in range(12)})
        record.event_timestamp = record.logged_at - timedelta(days=2)
    _write(home, records)
    # A window of a day: NOW is taken at import, which may be many minutes before this test runs.
    shown = runner.invoke(app, ["predictions", "show", "--since", "1d"])
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert len(lines) == 1 + len(records), shown.stdout
    assert "event time (UTC)" in lines[0]
    for line, record in zip(lines[1:], records, strict=True):
        assert record.event_id in line.split()
        assert f"{record.event_timestamp:%Y-%m-%d %H:%M:%S}" in line
        assert f"{record.logged_at:%Y-%m-%d %H:%M:%S}" in line
    assert "merchant_window_feature" not in shown.stdout
    assert "50 answers" in shown.stderr
    assert "--features" in shown.stderr
    assert "versions of no store yet" in shown.stderr  # no service claimed this log

    with_features = runner.invoke(app, ["predictions", "show", "--since", "1d", "--features"])
    assert with_features.exit_code == 0, with_features.output
    assert "merchant_window_feature_11=" in with_features.stdout
    assert len(with_features.stdout.splitlines()) > len(lines)

    claim_log(Settings(home=home, tracking_uri="http://serving:pw@127.0.0.1:5000"), home / "predictions")
    claimed = runner.invoke(app, ["predictions", "show", "--since", "1d"],
                            env={"MLOPS_TRACKING_URI": "http://admin:other@127.0.0.1:5000"})
    assert claimed.exit_code == 0, claimed.output
    assert "versions of http://127.0.0.1:5000" in " ".join(claimed.stderr.split())
