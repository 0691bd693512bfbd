"""Times the online feature fetch for one transaction, in-process, against a built MLOPS_HOME.

Run by benchmarks/features_before_after.py once per source tree (PYTHONPATH picks the tree), so
it speaks both feature APIs: the current one (entity histories + window features at the request's
time) and the one before the feature rewrite (per-event rows read as they are). Prints JSON.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from mlops.contract import load_contract
from mlops.settings import Settings


def _fetcher(settings: Settings) -> Callable[[pd.Series], object]:
    try:
        from feature_repo.store import open_store
    except ImportError:  # the tree before the core stopped importing feature_repo
        from mlops.feature_store import open_store  # type: ignore[attr-defined,no-redef]

    contract = load_contract(settings.contract_path)
    store = open_store(settings)
    keys = [e.join_key for e in contract.entities]
    try:
        from mlops.features import compute_features
        from mlops.online_features import OnlineFeatures
    except ImportError:  # the tree before the rewrite
        from mlops.feature_store import online_features  # type: ignore[attr-defined]

        return lambda row: online_features(store, [{k: str(row[k]) for k in keys}], contract)
    online = OnlineFeatures(store, contract)

    def fetch(row: pd.Series) -> object:
        entity = {k: str(row[k]) for k in keys}
        return compute_features(contract, online.read(entity), row[contract.timestamp_column],
                                {str(k): v for k, v in row.items()})

    return fetch


def main(data_path: str, n: int) -> None:
    settings = Settings()
    rows = pd.read_parquet(data_path).tail(n)
    fetch = _fetcher(settings)
    for _, row in rows.head(50).iterrows():  # warm-up: imports, connections, caches
        fetch(row)
    timings = []
    for _, row in rows.iterrows():
        start = time.perf_counter()
        fetch(row)
        timings.append(time.perf_counter() - start)
    ms = np.asarray(timings) * 1000
    print(json.dumps({"fetch_p50_ms": float(np.percentile(ms, 50)), "fetch_p99_ms": float(np.percentile(ms, 99))}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
