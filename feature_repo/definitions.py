"""Feast objects derived from the data contract: one entity per contract entity and, per entity, a
feature view holding its recent events (one JSON field: ids, times, aggregated column values) fed
by a push source. The views are online only: their batch source names the offline store (the
backfill's per-transaction table), which `mlops features materialize` reads with DuckDB rather
than through Feast's materialization, so the offline side never stores a history per event.

Window features are computed from these histories by mlops.features, offline and online alike. Not
a Feast on-demand feature view: Feast stores those transformations dill-pickled in its registry,
and loading the registry in the prediction service would unpickle code on the serving path.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from feast import Entity, FeatureView, Field, FileSource, PushSource, ValueType
from feast.types import Int64, String

from mlops.contract import DataContract, FeatureViewSpec
from mlops.histories import EVENTS_FIELD, NEWEST_FIELD


def push_source_name(view: FeatureViewSpec) -> str:
    return f"{view.view_name}_push"


def build_definitions(contract: DataContract, offline: Path) -> list[Any]:
    """Entities and history feature views for ``contract``; their batch source is the offline table."""
    entities = {
        e.name: Entity(name=e.name, join_keys=[e.join_key], value_type=ValueType.STRING)
        for e in contract.entities
    }
    views: list[Any] = []
    for spec in contract.feature_views:
        batch = FileSource(
            name=f"{spec.view_name}_source",
            path=str(offline),
            timestamp_field=contract.timestamp_column,
        )
        views.append(
            FeatureView(
                name=spec.view_name,
                entities=[entities[spec.entity]],
                # ttl 0 = rows never expire: an entity's last known history stays valid.
                ttl=timedelta(0),
                schema=[Field(name=EVENTS_FIELD, dtype=String), Field(name=NEWEST_FIELD, dtype=Int64)],
                # Every scored transaction is pushed here (write-through); batch rows come from `batch`.
                source=PushSource(name=push_source_name(spec), batch_source=batch),
                online=True,
            )
        )
    return [*entities.values(), *views]
