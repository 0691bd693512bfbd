"""Fixtures of the monitoring tests: seeded traffic per drift scenario (the first half in time is the
reference, the second the live window), prediction logs written as the service writes them, and
registered versions carrying a reference profile, on one MLflow store."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from served_traffic import LogWriter, Registrar, Traffic, score, served_features

from mlops import registry
from mlops.contract import DataContract
from mlops.data.generator import Scenario, generate_transactions
from mlops.prediction_log import PredictionLog, PredictionRecord
from mlops.reference_profile import PROFILE_ARTIFACT, ReferenceProfile, build_profile
from mlops.settings import Settings
from monitoring.settings import MonitoringSettings

ROWS = 8_000
SEED = 11


@pytest.fixture(scope="session")
def traffic(contract: DataContract) -> Traffic:
    """The second half (in time) of a seeded run of ``scenario``; the first half is the reference."""
    cache: dict[str, pd.DataFrame] = {}

    def make(scenario: Scenario) -> pd.DataFrame:
        if scenario not in cache:
            frame = served_features(generate_transactions(ROWS, seed=SEED, scenario=scenario), contract)
            frame["probability"] = score(frame)
            frame["unknown_categories"] = [
                [c for c in contract.model_inputs.categorical if row[c] not in (contract.column(c).categories or ())]
                for row in frame[list(contract.model_inputs.categorical)].to_dict("records")]
            cache[scenario] = frame
        return cache[scenario]

    return make


@pytest.fixture(scope="session")
def reference(traffic: Traffic, contract: DataContract) -> ReferenceProfile:
    """The first half's profile, its labels drawn from the fixtures' probabilities: the rule that scores
    them is calibrated by construction, and its score map says so."""
    first_half = traffic("none").iloc[: ROWS // 2]
    drawn = np.random.default_rng(SEED).random(len(first_half)) < first_half["probability"].to_numpy()
    return build_profile(first_half.assign(**{contract.label_column: drawn.astype("int64")}), contract,
                         first_half["probability"].to_numpy())


@pytest.fixture(scope="session")
def live(traffic: Traffic) -> Traffic:
    """The live window of ``scenario``: the second half in time, after the reference."""
    return lambda scenario: traffic(scenario).iloc[ROWS // 2:].reset_index(drop=True)


@pytest.fixture(scope="session")
def write_log(contract: DataContract) -> LogWriter:
    return lambda frame, log, **kwargs: _write_log(frame, contract, log, **kwargs)


def _write_log(frame: pd.DataFrame, contract: DataContract, log: PredictionLog, *, version: str = "1",
              logged_at: datetime | None = None, role: str = "champion", one_at_a_time: bool = False) -> None:
    """Append ``frame`` to a prediction log as the service would have, one second apart: in one batch, or
    ``one_at_a_time`` as the service writes them (a batch per answer, what the readers' many-batch paths read)."""
    start = logged_at or datetime.now(UTC) - timedelta(seconds=len(frame))
    keys = [e.join_key for e in contract.entities]
    records = [PredictionRecord(
        event_id=row[contract.id_column], event_timestamp=row[contract.timestamp_column],
        logged_at=start + timedelta(seconds=n), entities={k: row[k] for k in keys},
        inputs={name: row[name] for name in contract.raw_inputs},
        features={name: float(row[name]) for name in contract.feature_names},
        unknown_entities=[], unknown_categories=row["unknown_categories"],
        probability=float(row["probability"]), decision="fraud" if row["probability"] >= 0.5 else "legit",
        model_name="card-transactions", model_version=version, role=role, latency_s=row.get("latency_s"))
        for n, row in enumerate(frame.to_dict("records"))]
    if one_at_a_time:
        for record in records:
            log.append(record)
    else:
        log.write(records)


def _register_with_profile(settings: Settings, profile: ReferenceProfile) -> str:
    """A registered version whose training run carries the profile (no model file is needed here)."""
    mlflow_client = registry.client(settings)
    run = mlflow_client.create_run(registry.ensure_experiment(settings))
    mlflow_client.log_dict(run.info.run_id, profile.model_dump(), PROFILE_ARTIFACT)
    mlflow_client.set_terminated(run.info.run_id)
    if not mlflow_client.search_registered_models(f"name = '{settings.model_name}'"):
        mlflow_client.create_registered_model(settings.model_name)
    version = mlflow_client.create_model_version(settings.model_name, source=run.info.artifact_uri,
                                                 run_id=run.info.run_id)
    return str(version.version)


@pytest.fixture(scope="session")
def register_profile() -> Registrar:
    return _register_with_profile


@pytest.fixture(scope="session")
def tracking_uri(tmp_path_factory: pytest.TempPathFactory, new_mlflow_home: Callable[[Path], Path]) -> str:
    """One MLflow store for the monitoring tests (a copy of the migrated template)."""
    home = new_mlflow_home(tmp_path_factory.mktemp("mlflow"))
    return f"sqlite:///{home / 'mlflow.db'}"


@pytest.fixture
def canary_settings(tmp_path: Path, new_mlflow_home: Callable[[Path], Path], monkeypatch: pytest.MonkeyPatch,
                    register_profile: Registrar, reference: ReferenceProfile) -> tuple[MonitoringSettings, str, str]:
    """A store of its own with version 1 in production and version 2 as a 20 % canary: (settings, 1, 2)."""
    store = new_mlflow_home(tmp_path / "mlflow")
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLOPS_TRACKING_URI", f"sqlite:///{store / 'mlflow.db'}")
    settings = MonitoringSettings()
    champion, candidate = register_profile(settings, reference), register_profile(settings, reference)
    registry.promote(settings, champion, actor="test", reason="first")
    registry.start_canary(settings, candidate, 20, actor="test", reason="candidate")
    return settings, champion, candidate
