"""Delivered labels into the online label features: after `mlops labels ingest` stores the labels,
each labelled event's entities are looked up in the prediction log (it holds the keys every request
carried) and the label is set on that event in each entity's online history. Only then does a label
feature served online count it (see :mod:`mlops.features`); offline every label is known.

Idempotent per id, so labels may arrive late, out of order and more than once. Fail-closed: a store
or log error is raised, never read as "no entity to label".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict

from mlops.contract import DataContract
from mlops.online_features import LabelledEvent
from mlops.prediction_log import FLAT_PREFIXES, log_dir, window_tables
from mlops.settings import Settings
from monitoring.labels import ID, LABEL

if TYPE_CHECKING:
    import pandas as pd

_ENTITY = FLAT_PREFIXES[0]


class LabelDelivery(BaseModel):
    """What one delivery did: labels offered, of those with a logged prediction, histories changed."""

    model_config = ConfigDict(extra="forbid")

    labels: int
    logged: int
    histories: int


def uses_labels(contract: DataContract) -> bool:
    return any(view.uses_labels for view in contract.feature_views)


def logged_entity_keys(settings: Settings, ids: set[str]) -> dict[str, dict[str, str]]:
    """The entity keys the prediction log holds for each of ``ids`` (an id it never logged is absent)."""
    found: dict[str, dict[str, str]] = {}
    wanted = pa.array(sorted(ids), pa.string())
    for table in window_tables(log_dir(settings), None, None):
        # Arrow picks the labelled rows; only those become Python values (the log may hold millions).
        event_ids = pc.cast(table.column("event_id"), pa.string())
        matched = table.filter(pc.is_in(event_ids, value_set=wanted))
        columns = [c for c in matched.column_names if c.startswith(_ENTITY)]
        values = {c[len(_ENTITY):]: matched.column(c).to_pylist() for c in columns}
        for i, event_id in enumerate(pc.cast(matched.column("event_id"), pa.string()).to_pylist()):
            found[str(event_id)] = {k: str(v[i]) for k, v in values.items() if v[i] is not None}
    return found


def deliver_labels(settings: Settings, contract: DataContract, labels: pd.DataFrame) -> LabelDelivery:
    """Set ``labels`` (event_id, label) on the logged events in the online histories."""
    if not uses_labels(contract) or labels.empty:
        return LabelDelivery(labels=len(labels), logged=0, histories=0)
    by_id = dict(zip(labels[ID].astype(str), labels[LABEL].astype(float), strict=True))
    keys = logged_entity_keys(settings, set(by_id))
    events = [LabelledEvent(keys=keys[i], event_id=i, label=label) for i, label in by_id.items() if i in keys]
    from feature_repo.online import open_online_features

    online = open_online_features(settings, contract)
    try:
        changed = online.record_labels(events)
    finally:
        online.close()
    return LabelDelivery(labels=len(by_id), logged=len(events), histories=changed)
