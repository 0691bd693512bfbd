"""`mlops predict`: batch scores equal the service's for the same transactions replayed in time
order, against a real registry, feature store and the running app."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from served_platform import ServedPlatform
from typer.testing import CliRunner

from mlops.contract import load_contract
from mlops.contracts import BUNDLED_CONTRACT
from mlops.data.generator import generate_transactions
from mlops_cli.app import app
from serving.app import create_app

pytestmark = pytest.mark.integration

SAMPLE_ROWS = 1000


@pytest.fixture(scope="module")
def sample(platform_home: ServedPlatform, tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    """New cards and merchants (the online store has never seen them), so the service's histories
    are built by the replay itself, as the backfill builds them from the file."""
    frame = generate_transactions(SAMPLE_ROWS, seed=77)
    for column in ("transaction_id", "customer_id", "merchant_id"):
        frame[column] = "batch-" + frame[column].astype(str)
    path = tmp_path_factory.mktemp("batch") / "sample.parquet"
    frame.sample(frac=1.0, random_state=5).to_parquet(path, index=False)  # file order does not matter
    return frame, path


def test_batch_scores_equal_the_service_replayed_in_time_order(
        platform_home: ServedPlatform, sample: tuple[pd.DataFrame, Path], tmp_path: Path) -> None:
    frame, path = sample
    out = tmp_path / "scored.parquet"
    result = CliRunner().invoke(app, ["predict", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"scored {SAMPLE_ROWS:,} rows with version {platform_home.version}" in result.output
    scored = pd.read_parquet(out).set_index("transaction_id")
    assert len(scored) == SAMPLE_ROWS
    contract = platform_home.contract
    served = {}
    with TestClient(create_app(platform_home.settings)) as client:
        for _, row in frame.sort_values(["event_timestamp", "transaction_id"]).iterrows():
            body = {name: row[name] for name in contract.request_fields}
            body["event_timestamp"] = row["event_timestamp"].isoformat()
            response = client.post("/predict", json=body)
            assert response.status_code == 200, response.text
            served[row["transaction_id"]] = response.json()
    ids = list(served)
    probability = np.array([served[i]["probability"] for i in ids])
    assert np.abs(scored.loc[ids, "probability"].to_numpy() - probability).max() <= 1e-6
    assert scored.loc[ids, "decision"].tolist() == [served[i]["decision"] for i in ids]
    assert set(scored["model_version"]) == {platform_home.version}


@pytest.mark.parametrize(("arguments", "message"), [
    (["missing.parquet", "--out", "o.parquet"], "no such file or folder"),
    (["{data}", "--out", "o.csv"], "must name a .parquet file"),
    (["{data}", "--out", "o.parquet", "--version", "latest"], "is not a version number"),
])
def test_bad_arguments_exit_2_with_one_line(sample: tuple[pd.DataFrame, Path], arguments: list[str],
                                            message: str) -> None:
    _, path = sample
    result = CliRunner().invoke(app, ["predict", *[a.replace("{data}", str(path)) for a in arguments]])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_an_unknown_version_is_a_clear_error(sample: tuple[pd.DataFrame, Path], tmp_path: Path) -> None:
    _, path = sample
    result = CliRunner().invoke(app, ["predict", str(path), "--out", str(tmp_path / "o.parquet"), "--version", "999"])
    assert result.exit_code != 0
    assert "version 999 not found" in result.output
    assert not (tmp_path / "o.parquet").exists()


def test_spark_scores_get_the_services_decisions_and_the_version(tmp_path: Path) -> None:
    """Spark's output (a folder of parts, a _SUCCESS marker, a probability column) is decided by the
    service's rule, row by row: fraud at the threshold and above."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mlops.backfill.engines import scored_by_spark
    from mlops.backfill.interface import Scored
    from mlops.batch_scoring import _write_decided

    scored = tmp_path / "scored.parquet"
    scored.mkdir()
    for part, probabilities in enumerate(([0.1, 0.5], [0.49999, 0.9])):
        pq.write_table(pa.table({"transaction_id": [f"T{part}{n}" for n in range(2)], "probability": probabilities}),
                       scored / f"part-{part}.parquet")
    (scored / "_SUCCESS").write_text("")

    contract = load_contract(BUNDLED_CONTRACT)
    assert _write_decided(Scored(scored, scored_by_spark), tmp_path / "out.parquet", 0.5, "3", contract, None) == (4, 2)
    out = pd.read_parquet(tmp_path / "out.parquet")
    assert list(out.columns) == ["transaction_id", "probability", "decision", "model_version"]
    assert out["decision"].tolist() == ["legit", "fraud", "legit", "fraud"]
    assert set(out["model_version"]) == {"3"}
