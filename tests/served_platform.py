"""The served platform the serving tests share: a real registry and feature store.

No mocks: building it generates transactions, publishes and materializes features, trains a small
model, exports it, logs, registers and promotes it (about a minute on two cores). That is done once
per run, whatever the number of xdist workers (the ``built`` fixtures of tests/serving and
tests/benchmarks share it); each module gets a copy of the built home, so what one module's tests
record, register or promote never reaches another's. The copies' registry and feature definitions
still name the built home's files (model artifacts, the offline source), which every module only
reads.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from filelock import FileLock

from feature_repo.store import materialize_online, publish_features
from mlops import feature_store, registry
from mlops.contract import DataContract, load_contract
from mlops.data.generator import generate_transactions
from mlops.log_owner import CLAIM_FILE, store_identity
from mlops.registry_client import activate
from mlops.store_location import relocate_store
from pipelines.settings import PipelineSettings
from pipelines.training.export import export_and_check, log_model_to_mlflow
from pipelines.training.trainer import TrainParams, train_model
from serving.model_cache import ModelCache
from serving.settings import ServingSettings

N_ROWS = 3000
SEED = 3
MAX_EPOCHS = 3


@dataclass(frozen=True)
class ServedPlatform:
    settings: ServingSettings
    contract: DataContract
    transactions: pd.DataFrame
    onnx_path: Path
    version: str
    model_uri: str
    run_id: str


def _time_split(frame: pd.DataFrame, contract: DataContract) -> tuple[pd.DataFrame, ...]:
    ordered = frame.sort_values(contract.timestamp_column, kind="stable").reset_index(drop=True)
    n_test = int(len(ordered) * contract.split.test_fraction)
    n_val = int(len(ordered) * contract.split.validation_fraction)
    n_train = len(ordered) - n_val - n_test
    return ordered.iloc[:n_train], ordered.iloc[n_train:n_train + n_val], ordered.iloc[n_train + n_val:]


def build_platform(settings: ServingSettings) -> ServedPlatform:
    contract = load_contract(settings.contract_path)
    transactions = generate_transactions(N_ROWS, seed=SEED)
    publish_features(transactions, contract, settings)
    materialize_online(settings, contract, transactions[contract.timestamp_column].max().to_pydatetime())
    train, val, test = _time_split(feature_store.offline_features(settings, contract, transactions), contract)

    training = PipelineSettings()  # the pipeline's settings in the same environment (MLOPS_MAX_EPOCHS)
    result = train_model(train, val, contract, TrainParams.from_settings(training))
    export = export_and_check(result.trained, contract, test, settings.runs_dir / "serving-test",
                              training.parity_tolerance, metadata={"model_name": settings.model_name,
                                                 "contract_sha256": contract.fingerprint})

    experiment_id = registry.ensure_experiment(settings)
    client = activate(settings).client  # log_model_to_mlflow is fluent
    run_id = client.create_run(experiment_id).info.run_id
    model_uri = log_model_to_mlflow(run_id, export)
    client.set_terminated(run_id)
    version = registry.register_version(settings, model_uri, run_id, tags={"source": "tests/serving"})
    registry.promote(settings, version)
    return ServedPlatform(settings, contract, transactions, export.onnx_path, version, model_uri, run_id)


@contextmanager
def _home_in_env(home: Path) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLOPS_HOME", str(home))
        patch.setenv("MLOPS_MAX_EPOCHS", str(MAX_EPOCHS))
        yield


def built_platform(tmp_path_factory: pytest.TempPathFactory, shared_root: Path | None = None) -> ServedPlatform:
    """A home with a promoted model and a materialized online store, the original the modules copy.

    With ``shared_root`` (the run's temporary folder that every pytest-xdist worker shares) it is
    built once per run, not once per worker: the first worker to take the lock builds it there and
    records what it registered; the others wait for the lock and read the record.
    """
    if shared_root is None:
        with _home_in_env(tmp_path_factory.mktemp("served-built")):
            return build_platform(ServingSettings())
    home, record = shared_root / "served-built", shared_root / "served-built.json"
    with FileLock(f"{record}.lock"):
        if not record.exists():
            home.mkdir()
            with _home_in_env(home):
                built = build_platform(ServingSettings())
            record.write_text(json.dumps({"onnx_path": str(built.onnx_path), "version": built.version,
                                          "model_uri": built.model_uri, "run_id": built.run_id}))
            return built
    recorded = json.loads(record.read_text())
    with _home_in_env(home):
        settings = ServingSettings()
    return ServedPlatform(settings, load_contract(settings.contract_path), generate_transactions(N_ROWS, seed=SEED),
                          Path(recorded["onnx_path"]), recorded["version"], recorded["model_uri"], recorded["run_id"])


def platform_copy(built: ServedPlatform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedPlatform]:
    """A copy of ``built``'s home, with MLOPS_HOME pointing at it while it is in use."""
    original = built.settings.resolved_home
    home = tmp_path_factory.mktemp("served-home") / "home"
    shutil.copytree(original, home, symlinks=True, ignore=shutil.ignore_patterns("*-shm"))
    with _home_in_env(home):
        relocate_store(ServingSettings())  # as `mlops init` in a copied home: its own artifacts
        yield replace(built, settings=ServingSettings(), onnx_path=home / built.onnx_path.relative_to(original))


def sample_body(platform: ServedPlatform) -> dict[str, Any]:
    """A valid request for the busiest customer (it surely has features in the online store)."""
    data = platform.transactions
    customer = data["customer_id"].value_counts().index[0]
    row = data[data["customer_id"] == customer].iloc[-1]
    return {
        "transaction_id": "T-test-1",
        "customer_id": customer,
        "merchant_id": row["merchant_id"],
        "event_timestamp": "2026-03-02T12:00:00+00:00",
        "amount": 412.5,
        "merchant_category": "electronics",
        "channel": "online",
        "country": "NG",
    }


def cache_for_dead_registry(settings: ServingSettings, dead_tracking_uri: str,
                            live_tracking_uri: str | None = None) -> None:
    """Give ``dead_tracking_uri`` the cache entry a service of ``settings`` (on ``live_tracking_uri``,
    default the home's registry) wrote for the serving alias.

    The cache is per registry: a replica pointed at another (dead) tracking URI finds nothing the
    live one cached. Tests that stand a dead registry in for a killed one copy the entry over, as
    a service of that registry would have written it (the entry's sha256 is checked on reading).
    """
    root = settings.resolved_home / "serving" / "cache"
    live = ModelCache(root, live_tracking_uri or settings.resolved_tracking_uri, settings.model_name)
    entry = live.read(settings.serving_alias)
    assert entry is not None, "no cached model: the service of these settings has not loaded one"
    ModelCache(root, dead_tracking_uri, settings.model_name).write(settings.serving_alias, entry)


@contextmanager
def log_handed_to(settings: ServingSettings, dead_tracking_uri: str) -> Iterator[None]:
    """While inside, the home's prediction log belongs to ``dead_tracking_uri``'s store.

    A dead URI stands in for the home's own (killed) registry, but the log's claim names stores by
    URI: the replica of the dead one would be refused. The claim goes back on leaving.
    """
    claim = settings.resolved_home / "predictions" / CLAIM_FILE
    before = claim.read_bytes()
    claim.write_text(json.dumps({"store": store_identity(settings.model_copy(
        update={"tracking_uri": dead_tracking_uri}))}))
    try:
        yield
    finally:
        claim.write_bytes(before)
