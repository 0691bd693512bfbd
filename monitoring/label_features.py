"""Delivered labels into the online label features: after `mlops labels ingest` stores the labels,
each labelled event's entities are looked up in the prediction log (it holds the keys every request
carried) and the label is set on that event in each entity's online history. Only then does a label
feature served online count it (see :mod:`mlops.features`); offline every label is known.

Idempotent per id, so labels may arrive late, out of order and more than once. Each ingest delivers
only the labels not delivered yet (new ids, or a changed verdict), recorded after the online store
took them; a label whose prediction is not logged yet stays pending and is tried again next time.
Fail-closed: a store or log error is raised, never read as "no entity to label".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict

from mlops.contract import DataContract
from mlops.online_features import LabelledEvent
from mlops.prediction_log import FLAT_PREFIXES, log_dir, window_tables
from mlops.settings import Settings
from monitoring.labels import ID, LABEL, read_labels

if TYPE_CHECKING:
    from pathlib import Path

_ENTITY = FLAT_PREFIXES[0]
DELIVERED_FILE = "labels_delivered.parquet"


class LabelDelivery(BaseModel):
    """What one delivery did: labels offered, of those with a logged prediction, histories changed."""

    model_config = ConfigDict(extra="forbid")

    labels: int
    logged: int
    histories: int

    @property
    def pending(self) -> int:
        """Labels whose prediction is not in the log (yet): tried again at the next delivery."""
        return self.labels - self.logged


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
    return _deliver(settings, contract, labels)[0]


def _deliver(settings: Settings, contract: DataContract, labels: pd.DataFrame) -> tuple[LabelDelivery, set[str]]:
    """The delivery, and the ids of the labels whose event the log holds (the ones delivered)."""
    if not uses_labels(contract) or labels.empty:
        return LabelDelivery(labels=len(labels), logged=0, histories=0), set()
    by_id = dict(zip(labels[ID].astype(str), labels[LABEL].astype(float), strict=True))
    keys = logged_entity_keys(settings, set(by_id))
    events = [LabelledEvent(keys=keys[i], event_id=i, label=label) for i, label in by_id.items() if i in keys]
    from feature_repo.online import open_online_features

    online = open_online_features(settings, contract)
    try:
        changed = online.record_labels(events)
    finally:
        online.close()
    return LabelDelivery(labels=len(by_id), logged=len(events), histories=changed), set(keys)


def _delivered(monitoring_dir: Path) -> pd.DataFrame:
    path = monitoring_dir / DELIVERED_FILE
    if not path.exists():
        return pd.DataFrame({ID: pd.Series(dtype=str), LABEL: pd.Series(dtype="float64")})
    return pd.read_parquet(path)


def undelivered_labels(monitoring_dir: Path, known: pd.DataFrame | None = None) -> pd.DataFrame:
    """Stored labels the online histories have not taken yet (``known``: the delivered record, when
    already read): a new id, or a verdict that changed."""
    stored = read_labels(monitoring_dir).astype({ID: str, LABEL: "float64"})
    known = _delivered(monitoring_dir) if known is None else known
    merged = stored.merge(known, on=ID, how="left", suffixes=("", "_delivered"))
    fresh = merged[LABEL] != merged[f"{LABEL}_delivered"]  # NaN (never delivered) compares unequal
    return merged.loc[fresh, [ID, LABEL]].reset_index(drop=True)


def deliver_new_labels(settings: Settings, contract: DataContract) -> LabelDelivery:
    """Deliver the stored labels not delivered yet; record those the online store took."""
    known = _delivered(settings.monitoring_dir)
    labels = undelivered_labels(settings.monitoring_dir, known)
    delivery, logged = _deliver(settings, contract, labels)
    if not logged:
        return delivery
    taken = labels[labels[ID].isin(logged)]
    record = pd.concat([known, taken], ignore_index=True)
    record = record.drop_duplicates(ID, keep="last")
    path = settings.monitoring_dir / DELIVERED_FILE
    temporary = path.with_suffix(".tmp")
    record.to_parquet(temporary, index=False)
    temporary.replace(path)  # a reader never sees half a file; a crash before it only re-delivers (idempotent)
    return delivery
