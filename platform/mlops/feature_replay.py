"""Window features of a whole table by replaying its rows in time order through in-memory
histories: what the online store with write-through answers for the same stream, without a store.
A fast oracle for tests and benchmarks; pandas, which the service never loads."""

from __future__ import annotations

from typing import Any

import pandas as pd

from mlops.contract import DataContract
from mlops.features import canonical_text, compute_features, to_micros
from mlops.histories import History, append_event, empty_history


def replay_features(frame: pd.DataFrame, contract: DataContract) -> pd.DataFrame:
    """Every row's features by replaying the rows in time order through in-memory histories.

    What the online store with write-through answers for the same stream, without Feast: a fast
    oracle for tests and benchmarks. Returns one column per feature, indexed like ``frame``.
    """
    ts, row_id = contract.timestamp_column, contract.id_column
    keys = {v.view_name: contract.entity(v.entity).join_key for v in contract.feature_views}
    state: dict[tuple[str, str], History] = {}
    rows: dict[Any, dict[str, float]] = {}
    columns = sorted({c for view in contract.feature_views for c in view.value_columns})
    text_columns = {c: contract.column(c).dtype for view in contract.feature_views for c in view.text_columns}
    labelled = contract.label_column in frame  # the replay knows every label, as the backfill does
    moments = pd.to_datetime(frame[ts], utc=True)
    order = moments.reset_index(drop=True).sort_values(kind="stable").index
    # Plain records in time order: a row looked up by label through pandas costs more than its features.
    records = frame.iloc[order].to_dict("records")
    for index, moment, record in zip(frame.index[order], moments.iloc[order].tolist(), records, strict=True):
        histories = {name: state.get((name, str(record[key])), empty_history(view))
                     for view in contract.feature_views for name, key in [(view.view_name, keys[view.view_name])]}
        current = {c: float(record[c]) for c in columns}
        texts = {c: canonical_text(record[c], dtype) for c, dtype in text_columns.items()}
        rows[index] = compute_features(contract, histories, moment, {**current, **texts})
        micros = to_micros(moment)
        for view in contract.feature_views:
            appended = append_event(view, histories[view.view_name], str(record[row_id]), micros,
                                    {c: current[c] for c in view.value_columns},
                                    float(record[contract.label_column]) if labelled else None,
                                    {c: texts[c] for c in view.text_columns})
            if appended is not None:
                state[(view.view_name, str(record[keys[view.view_name]]))] = appended
    return pd.DataFrame.from_dict(rows, orient="index", columns=contract.feature_names).loc[frame.index]
