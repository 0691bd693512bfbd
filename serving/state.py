"""What every route of one service process shares: settings, contract, models, features, log, metrics."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from mlops.contract import DataContract
from mlops.prediction_log import PredictionLog, PredictionRecord
from mlops.settings import Settings
from serving.lifecycle import LoadedModel, ModelManager
from serving.metrics import ServiceMetrics
from serving.predictor import Gathered, Predictor, prediction_record

log = logging.getLogger(__name__)


@dataclass
class ServiceState:
    settings: Settings
    contract: DataContract
    metrics: ServiceMetrics
    manager: ModelManager
    prediction_log: PredictionLog
    predictor: Predictor | None = None
    shadow_pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=1, thread_name_prefix="shadow"))
    _pending_log: list[tuple[list[PredictionRecord], asyncio.Future[None]]] = field(default_factory=list)

    async def log_all(self, records: list[PredictionRecord]) -> None:
        """Append ``records`` to the log; returns once the OS holds them (the answer may then be sent).

        The records of every request that reaches this point in the same turn of the event loop
        go out as one write: a batch costs about what a single record does.
        """
        loop = asyncio.get_running_loop()
        if not self._pending_log:
            loop.call_soon(self._write_pending)
        written = loop.create_future()
        self._pending_log.append((records, written))
        await written

    def _write_pending(self) -> None:
        pending, self._pending_log = self._pending_log, []
        try:
            self.prediction_log.write([record for records, _ in pending for record in records])
        except Exception as exc:  # noqa: BLE001 - every waiting request answers with the error
            for _, written in pending:
                written.set_exception(exc)
            return
        for _, written in pending:
            written.set_result(None)

    def shadow(self, gathered: list[Gathered], request_id: str) -> None:
        """Score the challenger on the same inputs off the response path and log it beside the champion."""
        challenger = self.manager.challenger
        if challenger is None or self.predictor is None:
            return
        self.shadow_pool.submit(self._score_challenger, challenger, gathered, request_id)

    def _score_challenger(self, challenger: LoadedModel, gathered: list[Gathered], request_id: str) -> None:
        try:
            rows = [{**g.inputs, **g.features} for g in gathered]
            probabilities = challenger.model.predict_proba(rows)
            self.prediction_log.write([prediction_record(challenger, g, float(p), request_id=request_id,
                                                         latency_s=None, role="challenger")
                                       for g, p in zip(gathered, probabilities, strict=True)])
        except Exception:  # the shadow model must never disturb the champion's service (a failed log write included)
            log.exception("challenger scoring failed")
