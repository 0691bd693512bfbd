"""The drift job's column-at-a-time window (monitoring.log_window) against the whole-table read it
replaced: the same columns, values and row order, and the same drift verdicts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from served_traffic import LogWriter, Traffic

from mlops.contract import DataContract
from mlops.prediction_log import PredictionLog, PredictionRecord
from mlops.reference_profile import ReferenceProfile
from monitoring import log_window
from monitoring.drift import compute_drift
from monitoring.log_window import open_window
from monitoring.window import WindowSpec, read_window

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 30, 23, 50, tzinfo=UTC)  # the log crosses midnight: two day folders


def _replicas_log(directory: Path, live: Traffic, write_log: LogWriter, contract: DataContract) -> None:
    """Two replicas' segments interleaved in time (one serving a canary), and a third writer whose
    records lack an input (a layout of their own)."""
    traffic = live("amount_inflation")
    first, second = PredictionLog(directory), PredictionLog(directory)
    write_log(traffic.iloc[:700], first, logged_at=T0, one_at_a_time=True)
    write_log(traffic.iloc[700:1000], second, version="2", role="canary", logged_at=T0 + timedelta(seconds=0.5),
              one_at_a_time=True)
    first.close()
    second.close()
    third = PredictionLog(directory)
    dropped = contract.model_inputs.categorical[0]
    for n, row in enumerate(traffic.iloc[1000:1040].to_dict("records")):
        third.append(PredictionRecord(
            event_id=f"odd-{n}", event_timestamp=row[contract.timestamp_column],
            logged_at=T0 + timedelta(seconds=100.25 + n),
            entities={e.join_key: row[e.join_key] for e in contract.entities},
            inputs={c: row[c] for c in contract.raw_inputs if c != dropped},
            features={c: float(row[c]) for c in contract.feature_names}, unknown_entities=["customer"],
            unknown_categories=[], probability=float(row["probability"]), decision="legit",
            model_name="card-transactions", model_version="1"))
    third.close()


@pytest.mark.parametrize("spec", [
    WindowSpec(),
    WindowSpec(start=T0 + timedelta(seconds=90), end=T0 + timedelta(seconds=650)),
    WindowSpec(end=T0 + timedelta(seconds=120), last=123),
], ids=["whole-log", "bounded", "newest-rows"])
def test_every_column_reads_as_the_table_reads_it(tmp_path: Path, live: Traffic, write_log: LogWriter,
                                                  contract: DataContract, spec: WindowSpec) -> None:
    _replicas_log(tmp_path, live, write_log, contract)
    assert len({p.parent for p in tmp_path.glob("*/*.arrows")}) == 2
    assert len(list(tmp_path.glob("*/*.arrows"))) >= 3

    table = read_window(tmp_path, spec, arrow_strings=True)
    window = open_window(tmp_path, spec)

    assert len(window) == len(table) > 0
    assert sorted(window.columns) == sorted(table.columns)
    for column in table.columns:
        pd.testing.assert_series_equal(window[column], table[column], check_names=False)
    assert window["logged_at"].is_monotonic_increasing
    assert set(window["model_version"]) == ({"1", "2"} if len(window) > 123 else set(table["model_version"]))


def test_a_window_reads_the_same_whether_it_keeps_a_segments_batches_or_maps_it_again(
        tmp_path: Path, live: Traffic, write_log: LogWriter, contract: DataContract,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _replicas_log(tmp_path, live, write_log, contract)
    keeping = open_window(tmp_path, WindowSpec())
    # A batch per answer: the first replica's 600 before midnight and the second's 300 are kept; the first's
    # 100 after midnight and the third writer's 40 are too few to be worth it.
    assert sorted(len(part.batches or ()) for part in keeping.parts) == [0, 0, 300, 600]
    monkeypatch.setattr(log_window, "KEEP_MAPPED_BYTES", 0)  # no budget: every column maps its segments again
    mapping = open_window(tmp_path, WindowSpec())
    assert [part.batches for part in mapping.parts] == [None] * len(mapping.parts)
    for column in keeping.columns:
        pd.testing.assert_series_equal(keeping[column], mapping[column])
    for key in ("model_version", contract.entities[0].join_key):
        kept_codes, kept_labels = keeping.codes(key)
        mapped_codes, mapped_labels = mapping.codes(key)
        assert [kept_labels[c] for c in kept_codes] == [mapped_labels[c] for c in mapped_codes]


def test_rows_selected_by_version_and_by_sample_keep_their_values(tmp_path: Path, live: Traffic,
                                                                  write_log: LogWriter, contract: DataContract) -> None:
    _replicas_log(tmp_path, live, write_log, contract)
    table = read_window(tmp_path, WindowSpec(), arrow_strings=True)
    window = open_window(tmp_path, WindowSpec())

    groups = dict(window.groups(["model_name", "model_version"]))
    assert list(groups) == [("card-transactions", "1"), ("card-transactions", "2")]
    for (_, version), rows in groups.items():
        expected = table[table["model_version"] == version].reset_index(drop=True)
        assert rows["event_id"].tolist() == expected["event_id"].tolist()
        assert rows["probability"].tolist() == expected["probability"].tolist()
    sample = window.sample(100, seed=3).frame(["event_id", "amount"])
    assert len(sample) == 100
    assert sample["event_id"].is_unique
    by_id = table.set_index("event_id")["amount"]
    assert sample["amount"].tolist() == by_id.loc[sample["event_id"].tolist()].tolist()
    assert window.sample(10_000) is window  # a smaller window is its own sample


def test_drift_judged_from_the_segments_equals_drift_judged_from_the_table(
        tmp_path: Path, live: Traffic, write_log: LogWriter, contract: DataContract,
        reference: ReferenceProfile) -> None:
    _replicas_log(tmp_path, live, write_log, contract)
    cluster = contract.entities[0].join_key
    table = read_window(tmp_path, WindowSpec(), arrow_strings=True)
    window = open_window(tmp_path, WindowSpec())

    from_table = compute_drift(table, reference, cluster=cluster)
    from_segments = compute_drift(window, reference, cluster=cluster)

    assert from_segments == from_table
    assert from_segments.level != "INFO"  # the inflated amounts are found either way
    assert from_segments.feature(contract.model_inputs.categorical[0]).rows == len(window) - 40
