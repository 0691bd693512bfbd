"""Fixtures shared by every test folder."""

from __future__ import annotations

import atexit
import copy
import gc
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pytest

from mlops.contract import DataContract, load_contract
from mlops.data.generator import generate_transactions
from mlops.feature_replay import replay_features
from mlops.settings import BUNDLED_CONTRACT

if TYPE_CHECKING:
    from infra.schemas import SchemaValidator

# Traffic, reference profiles and registered versions for the monitoring tests; migrated MLflow stores.
pytest_plugins = ["mlflow_stores", "monitoring_fixtures", "spark_fixtures"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a pytest-xdist worker (`make test`: --dist loadscope --no-loadscope-reorder, each module on
    one worker, handed out in collection order): modules with end-to-end tests (minutes each) go
    first, after pytest-randomly's shuffle, so the workers do not end with one long module alone."""
    if not hasattr(config, "workerinput"):
        return
    e2e_modules = {item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("e2e")}
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in e2e_modules)  # stable: keeps the shuffle


@pytest.fixture(scope="session")
def contract() -> DataContract:
    """The bundled example contract (card transactions)."""
    return load_contract(BUNDLED_CONTRACT)


# Small train/validation/test splits with the contract's features, shared by the training tests.
Splits = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]


def with_features(df: pd.DataFrame, contract: DataContract) -> pd.DataFrame:
    """The contract's window and time features of each row, as serving would compute them."""
    return pd.concat([df, replay_features(df, contract)], axis=1)


def make_splits(contract: DataContract, rows: int = 3000, seed: int = 3) -> Splits:
    df = with_features(generate_transactions(rows, seed=seed, fraud_rate=0.03), contract)
    n = len(df)
    return df.iloc[: int(n * 0.7)], df.iloc[int(n * 0.7): int(n * 0.85)], df.iloc[int(n * 0.85):]


def write_splits(splits: Splits, data_dir: Path) -> Path:
    """The splits as preprocess leaves them: train/validation/test.parquet in one folder."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for name, frame in zip(("train", "validation", "test"), splits, strict=True):
        frame.to_parquet(data_dir / f"{name}.parquet", index=False)
    return data_dir


@pytest.fixture(scope="session")
def splits(contract: DataContract) -> Splits:
    return make_splits(contract)


@pytest.fixture(scope="session")
def data_dir(splits: Splits, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_splits(splits, tmp_path_factory.mktemp("splits"))




def _close_metric_files() -> None:
    # feast switches prometheus_client to multiprocess mode, whose mmap files are never closed;
    # at interpreter exit they would print ResourceWarnings after pytest's summary line.
    mmap_dict = sys.modules.get("prometheus_client.mmap_dict")
    if mmap_dict is None:
        return
    with warnings.catch_warnings():
        # isinstance() touches every live object; some (torch's lazy aliases) warn when touched.
        warnings.simplefilter("ignore")
        open_files = [obj for obj in gc.get_objects() if isinstance(obj, mmap_dict.MmapedDict)]
    for metric_file in open_files:
        metric_file.close()


atexit.register(_close_metric_files)


# --- infra/: the kustomize overlays built once per session (kubectl kustomize, offline) ---

@pytest.fixture(scope="session")
def built() -> dict[str, list[dict[str, Any]]]:
    from infra.manifests import OVERLAYS, build_overlay

    return {name: build_overlay(name) for name in OVERLAYS}


@pytest.fixture
def prod(built: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A private copy of the prod overlay's objects, free to mutate."""
    return copy.deepcopy(built["prod"])


@pytest.fixture(scope="session")
def validator() -> SchemaValidator:
    from infra.manifests import DEFAULT_CRD_DIR
    from infra.schemas import SchemaValidator

    return SchemaValidator(DEFAULT_CRD_DIR)
