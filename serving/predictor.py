"""Scoring requests: entity histories from the online store, the window and time features at
the request's event time, the ONNX graph, then the write-through that records the transaction.

Features come from mlops.features, the same function training used; the graph carries all
preprocessing. So this module only gathers inputs and never re-implements a transformation.
The model is passed in per call (see serving.lifecycle): a swap never changes a call midway.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel

from mlops.contract import DataContract, Decisions
from mlops.errors import InputError
from mlops.features import canonical_text, unknown_entities
from mlops.online_features import OnlineEvent, OnlineFeatures
from mlops.prediction_log import RETRY_ROLE, PredictionInputs, PredictionRecord
from serving.lifecycle import LoadedModel
from serving.metrics import ServiceMetrics

_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)  # histories count microseconds since the epoch


class Predictor:
    """Features and scoring for the domain API; safe to call from many threads."""

    def __init__(self, contract: DataContract, online: OnlineFeatures, metrics: ServiceMetrics, *,
                 max_clock_skew: timedelta) -> None:
        self.contract = contract
        self.online = online
        self.metrics = metrics
        self.max_clock_skew = max_clock_skew
        self._raw_inputs = contract.raw_inputs
        self._join_keys = [e.join_key for e in contract.entities]
        self._int_id = contract.key_is_int(contract.id_column)
        self._value_columns = sorted({c for v in contract.feature_views for c in v.value_columns})
        self._text_columns = {c: contract.column(c).dtype for v in contract.feature_views for c in v.text_columns}
        self._categories = {name: frozenset(contract.column(name).categories or ())
                            for name in contract.model_inputs.categorical}

    def event_times(self, requests: Sequence[BaseModel]) -> list[datetime]:
        """Each request's event time (now when it gives none); InputError for one before 1970 or in the future."""
        received = datetime.now(UTC)
        return [self._event_time(request, received) for request in requests]

    def _event_time(self, request: BaseModel, received: datetime) -> datetime:
        given: datetime | None = getattr(request, self.contract.timestamp_column)
        if given is None:
            return received
        if given < _EARLIEST:
            raise InputError(f"{self.contract.timestamp_column} {given.isoformat()} lies before 1970",
                             field=self.contract.timestamp_column)
        if given - received > self.max_clock_skew:
            raise InputError(f"{self.contract.timestamp_column} {given.isoformat()} lies more than "
                             f"{self.max_clock_skew.total_seconds():g} s in the future",
                             field=self.contract.timestamp_column)
        return given.astimezone(UTC)

    def gather(self, requests: Sequence[BaseModel], moments: Sequence[datetime]) -> list[PredictionInputs]:
        """Read the entities' histories, compute the features at the event times, record the events.

        ``moments`` come from :meth:`event_times`. The requests are recorded in order, together
        (one store read per view, one write): a later one of the same card sees the earlier ones.
        Each is answered from the events before its own time, whatever arrived first; a retry of
        an id already recorded at its first copy's time (see OnlineFeatures.record_events).
        """
        started = time.perf_counter()
        events = []
        for request, moment in zip(requests, moments, strict=True):
            events.append(OnlineEvent({key: str(getattr(request, key)) for key in self._join_keys},
                                      str(getattr(request, self.contract.id_column)), moment,
                                      {c: float(getattr(request, c)) for c in self._value_columns},
                                      {c: canonical_text(getattr(request, c), dtype)
                                       for c, dtype in self._text_columns.items()}))
        seen = self.online.record_events(events)
        gathered = []
        for request, event, answered in zip(requests, events, seen, strict=True):
            inputs = {name: getattr(request, name) for name in self._raw_inputs}
            histories, moment = answered.histories, answered.moment
            # model_construct: every value comes from the validated request and the store.
            gathered.append(PredictionInputs.model_construct(
                event_id=event.event_id, event_timestamp=moment, entities=dict(event.keys), inputs=inputs,
                features=answered.features,
                unknown_entities=unknown_entities(self.contract, histories, moment),
                unknown_categories=[name for name, known in self._categories.items() if inputs[name] not in known],
                retry=answered.retry, features_exact=answered.exact))
        self.metrics.gathered(time.perf_counter() - started, gathered)
        return gathered

    def score(self, model: LoadedModel, rows: list[PredictionInputs]) -> list[float]:
        """Probabilities of ``rows`` in one ONNX Runtime call."""
        started = time.perf_counter()
        probabilities = [float(p) for p in model.model.predict_proba([{**g.inputs, **g.features} for g in rows])]
        self.metrics.scored(time.perf_counter() - started, len(rows), probabilities, with_entities=True)
        return probabilities

    def _id_value(self, event_id: str) -> int | str:
        # Keys travel as text inside the service and the log (exact for integers); the answer gives
        # the id back in the contract's dtype, as it was asked.
        return int(event_id) if self._int_id else event_id

    def answer(self, model: LoadedModel, record: PredictionRecord) -> dict[str, Any]:
        """The domain API's answer for one logged prediction (its model's threshold beside the decision)."""
        return {
            self.contract.id_column: self._id_value(record.event_id),
            "request_id": record.request_id,
            "probability": record.probability,
            "decision": record.decision,
            "threshold": model.model.threshold,
            "model_name": record.model_name,
            "model_version": record.model_version,
            self.contract.timestamp_column: record.event_timestamp.isoformat(),
            "unknown_entities": record.unknown_entities,
            "unknown_categories": record.unknown_categories,
            "retry": record.retry,
            "features_exact": record.features_exact,
        }


def prediction_record(model: LoadedModel, gathered: PredictionInputs, probability: float, *, decisions: Decisions,
                      request_id: str, latency_s: float | None, role: str = "champion") -> PredictionRecord:
    """``gathered`` as ``model`` scored it: the record the log keeps and the answer is made of. A
    retry is logged with role RETRY_ROLE, so monitoring never counts one event twice as served."""
    return PredictionRecord.model_construct(  # values already validated (see Predictor.gather)
        **gathered.__dict__, logged_at=datetime.now(UTC), probability=probability,
        decision=decisions.of(probability, model.model.threshold), model_name=model.served.name,
        model_version=model.served.version, request_id=request_id, latency_s=latency_s,
        role=RETRY_ROLE if gathered.retry else role)
