"""The Feast store as the platform uses it: open, apply, point-in-time training features,
materialization and online lookup. Training and serving both go through here, so both read
the same feature definitions (feature_repo/) and the same defaults for unknown entities.

feast is imported lazily: importing it sets PROMETHEUS_MULTIPROC_DIR and takes seconds.
"""

from __future__ import annotations

from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Any

import pandas as pd
import yaml

from mlops.contract import DataContract
from mlops.features import AS_OF_OFFSET, compute_all_views, feature_defaults
from mlops.settings import Settings

if TYPE_CHECKING:
    from feast import FeatureStore


def feature_repo_path() -> Path:
    """The installed feature_repo package (works from a wheel as well as from the source tree)."""
    import feature_repo

    return Path(feature_repo.__file__).parent


def open_store(settings: Settings) -> FeatureStore:
    """A FeatureStore configured from feature_repo/feature_store.yaml with state under home."""
    from feast import FeatureStore
    from feast.repo_config import RepoConfig

    repo = feature_repo_path()
    template = Template((repo / "feature_store.yaml").read_text())
    raw: dict[str, Any] = yaml.safe_load(template.substitute(FEAST_DIR=str(settings.feast_dir)))
    settings.feast_dir.mkdir(parents=True, exist_ok=True)
    return FeatureStore(config=RepoConfig(repo_path=repo, **raw))


def feature_refs(contract: DataContract) -> list[str]:
    return [f"{v.view_name}:{f.name}" for v in contract.feature_views for f in v.features]


def publish_features(frame: pd.DataFrame, contract: DataContract, settings: Settings) -> FeatureStore:
    """Compute the feature tables from raw transactions, write the offline store, apply the repo."""
    from feature_repo.definitions import build_definitions, offline_path

    data_dir = settings.feast_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    for name, table in compute_all_views(frame, contract).items():
        table.to_parquet(offline_path(data_dir, name), index=False)
    store = open_store(settings)
    store.apply(build_definitions(contract, data_dir))
    return store


def training_features(store: FeatureStore, frame: pd.DataFrame, contract: DataContract,
                      *, as_of: pd.Timestamp | None = None) -> pd.DataFrame:
    """``frame`` plus its point-in-time features, in ``frame``'s row order.

    Each row gets the entity state just before its own timestamp (or at ``as_of`` when given,
    which is what the online store answers after materialization).
    """
    ts, row_id = contract.timestamp_column, contract.id_column
    keys = [e.join_key for e in contract.entities]
    entity_df = frame[[row_id, *keys]].copy()
    entity_df[ts] = (frame[ts] - AS_OF_OFFSET) if as_of is None else as_of
    joined = store.get_historical_features(entity_df=entity_df, features=feature_refs(contract)).to_df()
    features = joined.set_index(row_id)[contract.feature_names]
    missing = frame[row_id][~frame[row_id].isin(features.index)]
    if len(missing):
        raise RuntimeError(f"feature store returned no row for {len(missing)} transactions, e.g. {missing.iloc[0]}")
    result = frame.join(features, on=row_id)
    return result.fillna(feature_defaults(contract))


def materialize(store: FeatureStore, frame: pd.DataFrame, contract: DataContract) -> None:
    """Load the latest state of every entity into the online store."""
    ts = contract.timestamp_column
    start = (frame[ts].min() - pd.Timedelta(days=2)).to_pydatetime()
    end = (frame[ts].max() + pd.Timedelta(seconds=1)).to_pydatetime()
    store.materialize(start_date=start, end_date=end)


def online_features(store: FeatureStore, rows: list[dict[str, str]], contract: DataContract) -> pd.DataFrame:
    """Features for each entity row (a dict of join keys); unknown entities get the defaults."""
    response = store.get_online_features(features=feature_refs(contract), entity_rows=rows).to_df()
    return response[contract.feature_names].astype("float64").fillna(feature_defaults(contract))
