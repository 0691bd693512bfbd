"""The second example end to end, as a user with data of their own runs it: only the contract and the
data differ (integer ids, upper-case names, no categorical column, other decision names).

Generate, run the pipeline (a version is promoted), serve it and ask /predict with integer ids, score
a file with `mlops predict`, store late labels by the contract's id and label columns, and read the
quality and drift of the served traffic, each through the command line a user types.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pandas as pd
import pytest
from typer.testing import CliRunner

from feature_repo.store import materialize_online
from mlops.contract import DataContract, load_contract
from mlops.contracts import CONTRACTS_DIR
from mlops.settings import Settings
from mlops_cli.app import app
from pipelines.demo import free_port, replay_start, start_service, wait_ready
from pipelines.demo_replay import request_body
from pipelines.steps.preprocess import time_split

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]
ROWS = 20_000
runner = CliRunner()


@pytest.fixture
def own(tmp_path: Path) -> Iterator[tuple[Settings, DataContract]]:
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {"MLOPS_HOME": str(tmp_path / "home"), "MLOPS_MAX_EPOCHS": "8",
                           "MLOPS_CONTRACT_PATH": str(CONTRACTS_DIR / "terminals.yaml")}.items():
            patch.setenv(key, value)
        settings = Settings()
        yield settings, load_contract(settings.contract_path)


def _ok(arguments: list[str]) -> str:
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_the_terminal_example_runs_end_to_end_with_integer_ids(own: tuple[Settings, DataContract],
                                                              tmp_path: Path) -> None:
    settings, contract = own
    data_path = tmp_path / "payments.parquet"
    assert "of terminal-payments" in _ok(["data", "generate", "--out", str(data_path), "--rows", str(ROWS)])
    run = _ok(["pipeline", "run", str(data_path), "--runner", "inline"])
    assert "promote" in run, run
    assert settings.model_name == "terminal-payments"

    data = pd.read_parquet(data_path)
    test = time_split(data, contract)["test"].head(300)
    materialize_online(settings, contract, replay_start(data, contract))
    port = free_port(settings.host)
    base = f"http://{settings.host}:{port}"
    log = tmp_path / "serving.log"
    process = start_service(settings.model_copy(update={"port": port}), port, log)
    try:
        health = wait_ready(base, process, log)
        assert health["model_name"] == "terminal-payments"
        with httpx.Client(base_url=base, timeout=10) as http:
            answers = [http.post("/predict", json=request_body(row, contract)) for _, row in test.iterrows()]
            assert [a.status_code for a in answers] == [200] * len(test), answers[0].text
            first = answers[0].json()
            assert first["TRANSACTION_ID"] == int(test.iloc[0]["TRANSACTION_ID"])  # an integer, as asked
            assert {a.json()["decision"] for a in answers} <= {"fraud", "genuine"}
            text_id = {**request_body(test.iloc[0], contract), "TERMINAL_ID": "3"}
            refused = http.post("/predict", json=text_id)
            assert refused.status_code == 422
            assert "TERMINAL_ID" in refused.text
    finally:
        process.terminate()
        process.wait(timeout=30)

    labels = tmp_path / "labels.csv"
    test[["TRANSACTION_ID", "TX_FRAUD"]].to_csv(labels, index=False)
    _ok(["labels", "ingest", str(labels)])
    quality = _ok(["labels", "quality", "--window", "1D"])
    assert "PR-AUC" in quality
    assert "no labelled predictions" not in quality
    drift = _ok(["drift", "run"])
    assert "drift" in drift.lower()

    scored = tmp_path / "scored.parquet"
    assert "decisions" in _ok(["predict", str(data_path), "--out", str(scored)])
    out = pd.read_parquet(scored)
    assert len(out) == len(data)
    assert set(out["decision"]) <= {"fraud", "genuine"}
    assert out["TRANSACTION_ID"].dtype == data["TRANSACTION_ID"].dtype  # the ids keep their dtype

