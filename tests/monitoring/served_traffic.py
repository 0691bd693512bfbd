"""Traffic as the service scores it, for the monitoring tests and the drift benchmark.

Generator data with the window features the service computes (the same functions, event by event,
as the service's write-through does) and a fixed scoring rule standing in for the model's
probability, so a shift in the inputs shifts the predictions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from mlops.contract import DataContract
from mlops.data.generator import Scenario
from mlops.features import History, append_event, compute_features, empty_history, to_micros
from mlops.reference_profile import ReferenceProfile
from mlops.settings import Settings

# The monitoring conftest's fixtures: ``traffic``/``live`` (scenario -> frame), ``write_log``, ``register_profile``.
Traffic = Callable[[Scenario], pd.DataFrame]
LogWriter = Callable[..., None]
Registrar = Callable[[Settings, ReferenceProfile], str]


def served_features(raw: pd.DataFrame, contract: DataContract) -> pd.DataFrame:
    histories: dict[str, dict[str, History]] = {}
    for view in contract.feature_views:
        histories[view.view_name] = {}
    rows: list[dict[str, Any]] = []
    for record in raw.to_dict("records"):
        keys = {v.view_name: str(record[contract.entity(v.entity).join_key]) for v in contract.feature_views}
        current = {name: histories[name][key] for name, key in keys.items() if key in histories[name]}
        features = compute_features(contract, current, record["event_timestamp"],
                                    {"amount": float(record["amount"])})
        for view in contract.feature_views:
            known = current.get(view.view_name) or empty_history(view)
            updated = append_event(view, known, record["transaction_id"], to_micros(record["event_timestamp"]),
                                   {c: record[c] for c in view.value_columns})
            if updated is not None:
                histories[view.view_name][keys[view.view_name]] = updated
        rows.append({**{str(k): v for k, v in record.items()}, **features})
    return pd.DataFrame(rows)


def score(frame: pd.DataFrame) -> np.ndarray:
    """A fixed rule in place of a model: large amounts, fast bursts and risky shapes score high."""
    logit = (2.2 * (np.log1p(frame["amount"].to_numpy()) - 5.0) + 1.5 * frame["customer_txn_count_1h"].to_numpy()
             + 1.0 * (frame["channel"] == "online").to_numpy() - 2.5)
    return np.asarray(1 / (1 + np.exp(-logit)))
