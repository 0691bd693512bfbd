"""Feast objects derived from the data contract: one entity per contract entity, one feature view
of rolling aggregates per entity, and a feature service naming everything the model reads."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from feast import Entity, FeatureService, FeatureView, Field, FileSource, ValueType
from feast.types import Float64

from mlops.contract import DataContract

FEATURE_SERVICE = "model_inputs"


def offline_path(data_dir: Path, view_name: str) -> Path:
    return data_dir / f"{view_name}.parquet"


def build_definitions(contract: DataContract, data_dir: Path) -> list[Any]:
    """Entities, feature views and the feature service for ``contract``; sources under data_dir."""
    entities = {
        e.name: Entity(name=e.name, join_keys=[e.join_key], value_type=ValueType.STRING)
        for e in contract.entities
    }
    views: list[Any] = []
    for spec in contract.feature_views:
        source = FileSource(
            name=f"{spec.view_name}_source",
            path=str(offline_path(data_dir, spec.view_name)),
            timestamp_field=contract.timestamp_column,
        )
        views.append(
            FeatureView(
                name=spec.view_name,
                entities=[entities[spec.entity]],
                # ttl 0 = rows never expire: a customer's last known state stays valid.
                ttl=timedelta(0),
                schema=[Field(name=f.name, dtype=Float64) for f in spec.features],
                source=source,
                online=True,
            )
        )
    service = FeatureService(name=FEATURE_SERVICE, features=views)
    return [*entities.values(), *views, service]
