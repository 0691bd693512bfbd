"""Fixtures shared by every test folder."""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sqlite3
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import demo_home
import pandas as pd
import pytest
from filelock import FileLock
from mlflow_writes import MlflowGlobalWrites, count_global_writes
from sqlalchemy import event
from sqlalchemy.engine import Engine

from mlops.contract import DataContract, load_contract
from mlops.contracts import BUNDLED_CONTRACT
from mlops.data.generator import generate_transactions
from mlops.feature_replay import replay_features
from pipelines.settings import PipelineSettings

# tier_markers: every test's tier checked at collection; stray_stores: no MLflow store left in the working
# directory; pytester: the suite's own hooks are tested.
pytest_plugins = ("tier_markers", "stray_stores", "pytester")


def _uses_the_demo(item: pytest.Item) -> bool:
    return "demo_run" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a pytest-xdist worker (`make test`: --dist loadscope --no-loadscope-reorder, each module on
    one worker, handed out in collection order): the long modules (end-to-end tests, or a declared
    timeout: minutes each) go first, the longest declared timeout first, after pytest-randomly's
    shuffle, so the workers do not end with one long module alone. The long modules that need the
    run's demo come after the other long ones: the demo is built in the background meanwhile
    (pytest_collection_finish), and a worker handed one of them early would sit waiting for it."""
    if not hasattr(config, "workerinput"):
        return
    longest: dict[str, float] = {}
    demo_modules: set[str] = set()
    for item in items:
        timeout = item.get_closest_marker("timeout")
        declared = float(timeout.args[0]) if timeout is not None and timeout.args else 0.0
        long = declared or (1.0 if item.get_closest_marker("e2e") else 0.0)
        module = item.nodeid.split("::", 1)[0]
        longest[module] = max(longest.get(module, 0.0), long)
        if _uses_the_demo(item):
            demo_modules.add(module)

    def rank(item: pytest.Item) -> tuple[int, float]:
        module = item.nodeid.split("::", 1)[0]
        return (1 if module in demo_modules else 0) if longest[module] else 2, -longest[module]

    items.sort(key=rank)  # stable: keeps the shuffle otherwise


_background_demo: list[subprocess.Popen[bytes]] = []


def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker whose selection needs the demo: start it in the background (once per run)."""
    workerinput = getattr(session.config, "workerinput", None)
    if workerinput is None or not any(_uses_the_demo(item) for item in session.items):
        return
    started = demo_home.start_in_background(Path(session.config.option.basetemp).parent)
    if started is not None:
        _background_demo.append(started)


def pytest_unconfigure(config: pytest.Config) -> None:
    """A run stopped early does not leave the demo running (workers end together, when every test is done)."""
    for process in _background_demo:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)


@event.listens_for(Engine, "connect")
def _sqlite_commits_without_fsync(dbapi_connection: Any, _record: Any) -> None:
    """MLflow's SQLite stores in this process commit without waiting for the disk (PRAGMA synchronous=OFF).

    A commit is still atomic and survives the process being killed; only a crash of the machine could
    lose it, which no test simulates. The registry's tests commit about 70 times each, and the fsync
    of every commit was the largest cost of the fast tier's MLflow tests (5 s of test_registry's 32 s).
    The stores tests check for durability (the prediction log, the online features) use sqlite3
    directly, not SQLAlchemy, and keep their own settings.
    """
    if isinstance(dbapi_connection, sqlite3.Connection):
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA synchronous=OFF")
        cursor.close()

@pytest.fixture(autouse=True, scope="module")
def _mlflow_uris_unset_after_each_module() -> Iterator[None]:
    """A module that pointed MLflow's process-wide URIs at its own store (activate() in an in-process
    pipeline run, set_tracking_uri) leaves them unset for the next module on its worker, whose
    environment decides again: a client built without a URI never reaches a server that is gone."""
    yield
    if "mlflow" in sys.modules:  # not imported: nothing set them
        import mlflow

        mlflow.set_tracking_uri(None)  # type: ignore[arg-type]  # None = unset
        mlflow.set_registry_uri(None)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def contract() -> DataContract:
    """The bundled example contract (card transactions)."""
    return load_contract(BUNDLED_CONTRACT)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> demo_home.DemoRun:
    """The run's one real `mlops demo` (tests/demo_home.py): run once whatever the number of xdist
    workers, in the folder they share; tests copy its home (demo_copy) before they write to it."""
    basetemp = tmp_path_factory.getbasetemp()
    return demo_home.demo_run(basetemp if worker_id == "master" else basetemp.parent)


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


# --- MLflow: one migrated SQLite store per session, copied wherever a test needs a fresh one ---

@pytest.fixture(scope="session")
def mlflow_template(request: pytest.FixtureRequest) -> Path:
    """An empty MLflow SQLite store with every migration applied.

    A new store runs MLflow's alembic migrations (4-6 s here); a copy of this file opens in a
    fraction of a second. The Default experiment is removed, so each copy's first store creates
    its own with that store's artifact root, exactly as a brand-new database would. Built once per
    installed MLflow version in pytest's cache folder, under a lock the xdist workers share, and
    only ever read: no run or worker migrates a store of its own again.
    """
    folder = request.config.cache.mkdir(f"mlflow-template-{metadata.version('mlflow')}")
    db = folder / "mlflow.db"
    with FileLock(folder / "build.lock"):
        if not db.exists():
            from mlflow.tracking import MlflowClient

            building = folder / f"building-{os.getpid()}.db"
            MlflowClient(f"sqlite:///{building}").search_experiments()
            with sqlite3.connect(building) as connection:
                connection.execute("DELETE FROM experiments WHERE experiment_id = 0")
            connection.close()
            building.replace(db)  # whole or absent: a run stopped mid-migration leaves no template
    return db


# The migrated empty store's bytes, kept for the process: `make mutation` runs pytest once per
# mutant in processes forked from one that already ran the registry tests, so none migrates again.
_MIGRATED_STORE: list[bytes] = []


def _migrated_store(request: pytest.FixtureRequest) -> bytes:
    if not _MIGRATED_STORE:
        _MIGRATED_STORE.append(request.getfixturevalue("mlflow_template").read_bytes())
    return _MIGRATED_STORE[0]


def _fresh_home(home: Path, store: bytes) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "mlflow.db").write_bytes(store)
    return home


@pytest.fixture(scope="session")
def new_mlflow_home(request: pytest.FixtureRequest) -> Callable[[Path], Path]:
    """``home`` -> ``home`` holding a fresh migrated store (mlflow.db), where Settings(home=...) looks."""
    store = _migrated_store(request)
    return lambda home: _fresh_home(home, store)


@pytest.fixture
def mlflow_home(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """tmp_path/home with an empty, migrated MLflow store (mlflow.db)."""
    return _fresh_home(tmp_path / "home", _migrated_store(request))


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


@pytest.fixture
def settings(mlflow_home: Path, monkeypatch: pytest.MonkeyPatch) -> PipelineSettings:
    """The pipeline's settings (the base's and the training's) on an empty, migrated MLflow store, with
    MLOPS_HOME set for the CLI to find it too."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLOPS_HOME", str(mlflow_home))
    return PipelineSettings()



@pytest.fixture
def mlflow_global_writes(monkeypatch: pytest.MonkeyPatch) -> MlflowGlobalWrites:
    """Counts MLflow's global writes from here to the end of the test (the real functions still run)."""
    return count_global_writes(monkeypatch)


@pytest.fixture
def berlin_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The machine's local time zone is Berlin (UTC+1 in winter) for the test: nothing may depend on it."""
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
