"""The online side of the features: request-time histories from Feast's online store, the
write-through that records every scored transaction, and incremental batch materialization.

Both writers merge rather than overwrite: a history is the union of the events it held and the
new ones (idempotent per transaction id), so materializing an older batch never erases what the
service recorded since, and a retried request is recorded once. Events may arrive in any time
order: each is answered from the events before its own time, inserted in time order, and the
histories keep a lateness allowance beyond the longest window so that ordinary late events stay
exact (:mod:`mlops.late_events` says when one is not). Any store error is raised as
FeatureStoreError: a failing store is never read as "this entity has no history".
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from mlops.contract import DataContract, FeatureViewSpec
from mlops.decoded_histories import DecodedHistories
from mlops.errors import FeatureStoreError
from mlops.features import compute_features, to_micros
from mlops.histories import (
    EVENTS_FIELD,
    History,
    append_event,
    merge_histories,
    set_labels,
    stored_fields,
)
from mlops.late_events import exact_at, first_copy_time
from mlops.sqlite_online import OnlineRow

if TYPE_CHECKING:
    from pathlib import Path

    from feast import FeatureStore

    from mlops.backfill.interface import FeatureEngine


_LOCK_STRIPES = 256
_MATERIALIZE_BATCH = 500
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _store_call(what: str) -> Any:
    """Re-raise any store failure as FeatureStoreError naming ``what`` failed."""
    @contextmanager
    def guard() -> Iterator[None]:
        try:
            yield
        except FeatureStoreError:
            raise
        except Exception as exc:  # a store can fail in any way; none of them may read as "empty"
            raise FeatureStoreError(f"online store {what} failed: {type(exc).__name__}: {exc}") from exc
    return guard()


@dataclass(frozen=True)
class OnlineEvent:
    """A scored transaction to record: its entities' keys, id, event time and the values views keep
    (``texts``: its canonical text of the views' key-like columns, see :func:`mlops.features.canonical_text`)."""

    keys: Mapping[str, str]
    event_id: str
    moment: datetime
    values: Mapping[str, float]
    texts: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class SeenEvent:
    """How a recorded event is answered: its entities' histories before it, the time it is
    answered at (a retry's: its first copy's), its features (a retry's: the first copy's answer),
    whether it is a retry of an id already recorded, and whether the histories held every event its
    features reach back to."""

    histories: dict[str, History]
    moment: datetime
    features: dict[str, float]
    retry: bool
    exact: bool


@dataclass(frozen=True)
class LabelledEvent:
    """A delivered label: the event's id, its entities' keys (as the request carried them) and the 0/1 label."""

    keys: Mapping[str, str]
    event_id: str
    label: float


class OnlineRows(Protocol):
    """An online store as the features use it: string fields of entity rows, written in batches."""

    @property
    def local(self) -> bool:
        """Whether the store is a local file (answers in microseconds) rather than a network service."""
        ...

    def read(self, view: str, join_key: str, entities: Sequence[str], field: str) -> list[str | None]: ...

    def write(self, rows: Sequence[OnlineRow]) -> None: ...

    def atomically(self, keys: Iterable[tuple[str, str]]) -> AbstractContextManager[None]:
        """Reads and writes of these (join key, entity) pairs inside the block are one atomic
        read-modify-write, across processes and replicas."""
        ...

    def close(self) -> None: ...


class OnlineFeatures:
    """Entity histories for requests, and the write-through of scored transactions.

    ``rows`` is the store: :class:`mlops.sqlite_online.SqliteOnlineRows` (the embedded SQLite store,
    without feast) or :class:`feature_repo.store.FeastOnlineRows` (Redis). Safe to use from many threads, processes
    and replicas: a read-modify-write of an entity holds that entity's lock in this process
    (striped) and the store's own (SQLite's write transaction, or the entity's lock in Redis).
    """

    def __init__(self, rows: OnlineRows, contract: DataContract, *, lateness: timedelta = timedelta(0),
                 decoded: DecodedHistories | None = None) -> None:
        self.rows = rows
        self.contract = contract
        # How much later than an entity's newest event an event may arrive and still be answered exactly.
        self._lateness_us = int(lateness.total_seconds() * 1_000_000)
        self._views = {v.view_name: v for v in contract.feature_views}
        self._keys = {v.view_name: contract.entity(v.entity).join_key for v in contract.feature_views}
        self._answers_view = contract.feature_views[0].view_name  # keeps each event's first answer
        self._entity_locks = [threading.Lock() for _ in range(_LOCK_STRIPES)]
        self._decoded = DecodedHistories() if decoded is None else decoded  # this process's decoded histories

    @contextmanager
    def entities_locked(self, entities: Iterable[tuple[str, str]]) -> Iterator[None]:
        """Hold the locks of these (join key, value) pairs, taken in one global order (no deadlock)."""
        stripes = sorted({zlib.crc32(f"{k}={v}".encode()) % _LOCK_STRIPES for k, v in entities})
        with ExitStack() as stack:
            for stripe in stripes:
                stack.enter_context(self._entity_locks[stripe])
            yield

    @property
    def local(self) -> bool:
        """Whether calls answer in microseconds from a local file (see :class:`OnlineRows`)."""
        return self.rows.local

    def read(self, keys: Mapping[str, str]) -> dict[str, History]:
        """The histories of one request's entities (empty for an entity the store does not know)."""
        return {name: self._read_view(view, [keys[self._keys[name]]])[0] for name, view in self._views.items()}

    def record_events(self, events: Sequence[OnlineEvent]) -> list[SeenEvent]:
        """Answer ``events`` in order and insert them into their entities' histories.

        One read per view for all the events' entities and one write for everything that changed,
        in one atomic read-modify-write of the entities (across processes and replicas): the same
        result as recording the events one after the other, at the cost of one. An event is
        answered from the events before its own time and inserted in time order, whatever the time
        of the events already held; an id already held is a retry: it gets its first copy's answer
        (or, once that answer is pruned, the features at the first copy's time while another of its
        histories holds it; once none does, it is a new event) and is not inserted again.
        """
        entities = {name: list(dict.fromkeys(e.keys[self._keys[name]] for e in events)) for name in self._views}
        keys = [(self._keys[name], e) for name, values in entities.items() for e in values]
        # The process's striped locks queue its own threads; the store's lock excludes other processes.
        with self.entities_locked(keys), _store_call("write-through"), self.rows.atomically(keys):
            current = {name: dict(zip(entities[name], self._read_view(view, entities[name]), strict=True))
                       for name, view in self._views.items()}
            changed: dict[tuple[str, str], History] = {}
            seen = []
            for event in events:
                answered = self._answer(event, {name: current[name][event.keys[self._keys[name]]]
                                                for name in self._views})
                # Only an exact answer is kept: a retry of an inexact one is computed (and flagged) again.
                answer = ([answered.features[n] for n in self.contract.feature_names]
                          if answered.exact and not answered.retry else None)
                for name, view in self._views.items():
                    entity = event.keys[self._keys[name]]
                    updated = append_event(view, answered.histories[name], event.event_id,
                                           to_micros(answered.moment), event.values, texts=event.texts,
                                           lateness_us=self._lateness_us,
                                           answer=answer if name == self._answers_view else None)
                    if updated is not None:
                        current[name][entity] = changed[name, entity] = updated
                seen.append(answered)
            if changed:
                self.rows.write([self._row(self._views[name], entity, history)
                                 for (name, entity), history in changed.items()])
        return seen

    def _answer(self, event: OnlineEvent, histories: dict[str, History]) -> SeenEvent:
        """``event`` answered from its entities' ``histories`` (before it is inserted)."""
        first = next((t for h in histories.values() if (t := first_copy_time(h, event.event_id)) is not None), None)
        t_us = to_micros(event.moment) if first is None else first
        moment = event.moment if first is None else _utc(first)
        kept = histories[self._answers_view].answers.get(event.event_id)
        features = (dict(zip(self.contract.feature_names, kept, strict=True)) if kept is not None
                    else compute_features(self.contract, histories, moment, {**event.values, **event.texts}))
        exact = kept is not None or all(exact_at(view, histories[name], t_us) for name, view in self._views.items())
        return SeenEvent(histories, moment, features, first is not None, exact)

    def record_labels(self, events: Sequence[LabelledEvent]) -> int:
        """Set each delivered label on its event in the histories of the event's entities, for the
        views with label features; the number of histories that changed.

        Idempotent (a label delivered again changes nothing) and order-free (a label for an event the
        history no longer keeps, or does not hold yet, is left out). One atomic read-modify-write per
        batch of entities, as for the write-through; a store error is raised, never skipped.
        """
        changed = 0
        for name, view in self._views.items():
            if not view.uses_labels:
                continue
            key = self._keys[name]
            by_entity: dict[str, dict[str, float]] = {}
            for event in events:
                if key in event.keys:
                    by_entity.setdefault(str(event.keys[key]), {})[event.event_id] = float(event.label)
            entities = list(by_entity)
            for start in range(0, len(entities), _MATERIALIZE_BATCH):
                batch = entities[start:start + _MATERIALIZE_BATCH]
                keys = [(key, entity) for entity in batch]
                with self.entities_locked(keys), _store_call("label write"), self.rows.atomically(keys):
                    current = self._read_view(view, batch)
                    updated = [(entity, set_labels(view, history, by_entity[entity]))
                               for entity, history in zip(batch, current, strict=True)]
                    rows = [self._row(view, entity, history) for entity, history in updated if history is not None]
                    if rows:
                        self.rows.write(rows)
                        changed += len(rows)
        return changed

    def _row(self, view: FeatureViewSpec, entity: str, history: History) -> OnlineRow:
        fields = stored_fields(view, history)
        # The text is what the next read of the entity will most likely find: no decode then.
        self._decoded.keep(view, entity, fields[EVENTS_FIELD], history)
        return OnlineRow(view.view_name, self._keys[view.view_name], entity, fields, _utc(history.times[-1]))

    def _read_view(self, view: FeatureViewSpec, entities: Sequence[str]) -> list[History]:
        with _store_call("read"):  # a stored value that does not decode is the store's failure too
            texts = self.rows.read(view.view_name, self._keys[view.view_name], entities, EVENTS_FIELD)
            return [self._decoded.decode(view, entity, text) for entity, text in zip(entities, texts, strict=True)]

    def close(self) -> None:
        self.rows.close()

    def materialize(self, store: FeatureStore, end: datetime, offline: Path, engine: FeatureEngine) -> dict[str, int]:
        """Merge each entity's history as of ``end`` from the offline table into the online store.

        Incremental: only entities with an event after the view's last materialized end are read,
        and the interval is recorded in ``store``'s registry. Streams: ``engine`` computes each
        entity's kept events (:meth:`mlops.backfill.interface.FeatureEngine.latest_histories`) and
        they are merged and written a batch of entities at a time. Returns the entities written per view.
        """
        written: dict[str, int] = {}
        for name, view in self._views.items():
            feature_view = store.get_feature_view(name)
            start = feature_view.most_recent_end_time
            count = 0
            with _store_call("offline read"):
                batches = engine.latest_histories(offline, self.contract, view, end, start, batch=_MATERIALIZE_BATCH)
                for batch in batches:
                    self._merge_histories(view, batch)
                    count += len(batch)
            written[name] = count
            with _store_call("registry update"):
                store.registry.apply_materialization(feature_view, store.project, start or _EPOCH, end)
        return written

    def _merge_histories(self, view: FeatureViewSpec, latest: Sequence[tuple[str, History]]) -> None:
        key = self._keys[view.view_name]
        entities = [entity for entity, _ in latest]
        with self.entities_locked((key, e) for e in entities):
            current = self._read_view(view, entities)
            merged = [self._row(view, entity, merge_histories(view, online, history, lateness_us=self._lateness_us))
                      for (entity, history), online in zip(latest, current, strict=True)]
            with _store_call("write"):
                self.rows.write(merged)


def _utc(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)
