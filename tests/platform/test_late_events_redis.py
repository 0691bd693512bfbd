"""Late and retried events through Redis (Feast's Redis online store, the entities' locks in Redis):
any arrival order gives each event the offline store's point-in-time features, for every feature
family, and a retry gets its first answer, as with SQLite (tests/platform/test_late_events.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from late_arrivals import EVENTS, Event, arrivals, check_arrivals, events_frame, every_family
from redis_server import REDIS_MISSING, REDIS_SERVER, redis_server

from feature_repo.online import open_online_features
from feature_repo.store import publish_features
from mlops.contract import DataContract
from mlops.online_features import OnlineFeatures
from mlops.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.skipif(REDIS_SERVER is None, reason=REDIS_MISSING)]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="module")
def families(contract: DataContract) -> DataContract:
    return every_family(contract)


@pytest.fixture(scope="module")
def redis_online(families: DataContract, redis_url: str, tmp_path_factory: pytest.TempPathFactory,
                 ) -> Iterator[OnlineFeatures]:
    home: Path = tmp_path_factory.mktemp("late-redis")
    settings = Settings(home=home, online_store="redis", redis_url=redis_url,
                        late_event_allowance_s=timedelta(days=41).total_seconds())  # the streams span 40 days
    publish_features(events_frame([("seed", "seed", timedelta(0), 1.0, "pos", 0)], "seed-"), families, settings)
    online = open_online_features(settings, families)
    yield online
    online.close()


@hypothesis_settings(max_examples=8, deadline=None)
@given(data=st.data(), events=EVENTS)
def test_any_arrival_order_through_redis_gets_the_offline_features_and_retries_their_first_answer(
        families: DataContract, redis_online: OnlineFeatures, data: st.DataObject, events: list[Event]) -> None:
    check_arrivals(redis_online, families, events, data.draw(arrivals(len(events))), exact_only=True)
