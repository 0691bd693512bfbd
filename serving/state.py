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

    async def log_all(self, records: list[PredictionRecord]) -> None:
        """Append ``records`` to the log; returns once the OS holds them (the answer may then be sent)."""
        futures = [self.prediction_log.submit(r) for r in records]
        await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))

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
            for g, p in zip(gathered, probabilities, strict=True):
                self.prediction_log.submit(prediction_record(challenger, g, float(p), request_id=request_id,
                                                             latency_s=None, role="challenger"))
        except Exception:  # the shadow model must never disturb the champion's service
            log.exception("challenger scoring failed")
