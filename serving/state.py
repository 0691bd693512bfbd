"""What every route of one service process shares: settings, contract, models, features, log, metrics,
and the shadow scorer: one thread that scores off the response path (the challenger's shadow scores,
the champion's paired scores of the canary's rows) from a bounded queue. When it falls behind, the
batches past ``MLOPS_SHADOW_MAX_PENDING`` are dropped and counted per role
(``mlops_shadow_dropped_rows_total``) instead of queueing in memory without limit; the answers never
wait for it. The canary analysis pairs only the rows whose paired score was logged (monitoring.canary).
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlops.contract import DataContract
from mlops.errors import ModelNotReadyError
from mlops.failure_log import FailureLog
from mlops.prediction_log import PAIRED_ROLE, PredictionInputs, PredictionLog
from serving.answering import Inference, InferJob, PredictJob, answer_inference, answer_predictions
from serving.batching import TurnBatcher
from serving.lifecycle import LoadedModel, ModelManager
from serving.metrics import ServiceMetrics
from serving.predictor import Predictor, prediction_record
from serving.settings import ServingSettings

log = logging.getLogger(__name__)


@dataclass
class ServiceState:
    settings: ServingSettings
    contract: DataContract
    metrics: ServiceMetrics
    manager: ModelManager
    prediction_log: PredictionLog
    failure_log: FailureLog
    predictor: Predictor | None = None
    shadow_pool: ShadowPool = field(init=False)
    # Concurrent requests, answered together (serving.batching).
    predictions: TurnBatcher[PredictJob, list[dict[str, Any]]] = field(init=False)
    inferences: TurnBatcher[InferJob, Inference] = field(init=False)

    def __post_init__(self) -> None:
        self.shadow_pool = ShadowPool(self.settings.shadow_max_pending, self.metrics.shadow_dropped_rows)
        self.metrics.shadow_pending.set_function(lambda: self.shadow_pool.pending)
        self.predictions = TurnBatcher(functools.partial(answer_predictions, self))
        self.inferences = TurnBatcher(functools.partial(answer_inference, self))

    def require_predictor(self) -> Predictor:
        if self.predictor is None:
            raise ModelNotReadyError("the feature store is not open yet")
        return self.predictor

    def shadow(self, gathered: list[PredictionInputs], request_id: str) -> None:
        """Score the challenger on the same inputs off the response path and log it beside the champion."""
        challenger = self.manager.challenger
        if challenger is None or self.predictor is None:
            return
        self.shadow_pool.submit("challenger", len(gathered),
                                functools.partial(self._score_shadow, challenger, gathered, request_id, "challenger"))

    def pair(self, champion: LoadedModel, gathered: list[PredictionInputs], request_id: str) -> None:
        """Score the champion, off the response path, on the rows the canary answered, logged as role
        ``champion-paired``: the canary analysis compares PR-AUC on the same rows (a paired bootstrap)."""
        if gathered:
            self.shadow_pool.submit(PAIRED_ROLE, len(gathered),
                                    functools.partial(self._score_shadow, champion, gathered, request_id, PAIRED_ROLE))

    def _score_shadow(self, model: LoadedModel, gathered: list[PredictionInputs], request_id: str, role: str) -> None:
        try:
            rows = [{**g.inputs, **g.features} for g in gathered]
            probabilities = model.model.predict_proba(rows)
            self.prediction_log.write([prediction_record(model, g, float(p), decisions=self.contract.decisions,
                                                         request_id=request_id, latency_s=None, role=role)
                                       for g, p in zip(gathered, probabilities, strict=True)])
        except Exception:  # a shadow score must never disturb the service (a failed log write included)
            log.exception("%s scoring failed", role)


class ShadowPool:
    """One thread running scoring work off the response path, at most ``max_pending`` batches waiting
    for it; :meth:`submit` never blocks: a batch past the bound is dropped and ``dropped(role, rows)``
    told. The thread starts with the first batch."""

    def __init__(self, max_pending: int, dropped: Callable[[str, int], None]) -> None:
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=max_pending)
        self._dropped = dropped
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def pending(self) -> int:
        """Batches waiting (the one being scored not counted)."""
        return self._queue.qsize()

    def submit(self, role: str, rows: int, work: Callable[[], None]) -> bool:
        """Queue ``work`` (``rows`` rows scored as ``role``); False when it was dropped."""
        with self._lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="shadow", daemon=True)
                self._thread.start()
        if self._closed:
            self._dropped(role, rows)
            return False
        try:
            self._queue.put_nowait(work)
        except queue.Full:
            self._dropped(role, rows)
            return False
        return True

    def shutdown(self, wait: bool = True) -> None:
        """Score what is queued, then stop the thread (``wait``: return once it has)."""
        with self._lock:
            self._closed, thread = True, self._thread
        if thread is None or not thread.is_alive():
            return
        self._queue.put(None)  # after the queued batches; waits for room while the queue is full
        if wait:
            thread.join()

    def _run(self) -> None:
        while (work := self._queue.get()) is not None:
            try:
                work()
            except Exception:  # the work logs its own failures; nothing may stop the thread
                log.exception("shadow work failed")
