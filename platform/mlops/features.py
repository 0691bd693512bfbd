"""Rolling per-entity aggregates as of event time, computed from raw transactions (pure pandas).

The row for an entity at time t includes the transaction at t. Training therefore joins these
rows as of just before each transaction (:data:`AS_OF_OFFSET`), which is exactly what the online
store holds when a new transaction arrives. Each entity also gets a "no history" row before its
first transaction, carrying the same defaults serving uses for unknown entities, so the
point-in-time join never drops a first transaction.
"""

from __future__ import annotations

import pandas as pd

from mlops.contract import DataContract, FeatureViewSpec

AS_OF_OFFSET = pd.Timedelta(microseconds=1)
NO_HISTORY_VALUE = 0.0
_GENESIS_OFFSET = pd.Timedelta(days=1)


def feature_defaults(contract: DataContract) -> dict[str, float]:
    """Values of every feature for an entity with no history (used offline and online)."""
    return dict.fromkeys(contract.feature_names, NO_HISTORY_VALUE)


def compute_view(frame: pd.DataFrame, contract: DataContract, view: FeatureViewSpec) -> pd.DataFrame:
    """One feature table: join key, timestamp and the view's rolling features, one row per event."""
    key = contract.entity(view.entity).join_key
    ts = contract.timestamp_column
    value_columns = sorted({f.column for f in view.features if f.column})
    data = frame[[key, ts, *value_columns]].copy()
    data["_one"] = 1.0
    data = data.sort_values([key, ts], kind="stable").reset_index(drop=True)
    grouped = data.set_index(ts).groupby(key, sort=False)
    out = data[[key, ts]].copy()
    for feature in view.features:
        column = feature.column or "_one"
        rolling = grouped[column].rolling(feature.window_delta, closed="right")
        agg = "sum" if feature.agg == "count" else feature.agg
        values = getattr(rolling, agg)()
        # groupby().rolling() returns values in group order, which matches the sort above.
        out[feature.name] = values.to_numpy(dtype="float64")
    # Several events of one entity at the same instant: the last row has the full state.
    out = out.drop_duplicates(subset=[key, ts], keep="last")
    genesis = (
        data.groupby(key, sort=False)[ts].min().sub(_GENESIS_OFFSET).rename(ts).reset_index()
    )
    for feature in view.features:
        genesis[feature.name] = NO_HISTORY_VALUE
    result = pd.concat([genesis, out], ignore_index=True)
    result[ts] = pd.to_datetime(result[ts], utc=True)
    return result.sort_values([ts, key], kind="stable").reset_index(drop=True)


def compute_all_views(frame: pd.DataFrame, contract: DataContract) -> dict[str, pd.DataFrame]:
    """Every feature table of the contract, keyed by feature view name."""
    return {view.view_name: compute_view(frame, contract, view) for view in contract.feature_views}
