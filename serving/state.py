"""What every route of one service process shares: settings, contract, models, features, log, metrics."""

from __future__ import annotations

import functools
import logging
from concurrent.futures import ThreadPoolExecutor
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
    shadow_pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=1, thread_name_prefix="shadow"))
    # Concurrent requests, answered together (serving.batching).
    predictions: TurnBatcher[PredictJob, list[dict[str, Any]]] = field(init=False)
    inferences: TurnBatcher[InferJob, Inference] = field(init=False)

    def __post_init__(self) -> None:
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
        self.shadow_pool.submit(self._score_shadow, challenger, gathered, request_id, "challenger")

    def pair(self, champion: LoadedModel, gathered: list[PredictionInputs], request_id: str) -> None:
        """Score the champion, off the response path, on the rows the canary answered, logged as role
        ``champion-paired``: the canary analysis compares PR-AUC on the same rows (a paired bootstrap)."""
        if gathered:
            self.shadow_pool.submit(self._score_shadow, champion, gathered, request_id, PAIRED_ROLE)

    def _score_shadow(self, model: LoadedModel, gathered: list[PredictionInputs], request_id: str, role: str) -> None:
        try:
            rows = [{**g.inputs, **g.features} for g in gathered]
            probabilities = model.model.predict_proba(rows)
            self.prediction_log.write([prediction_record(model, g, float(p), decisions=self.contract.decisions,
                                                         request_id=request_id, latency_s=None, role=role)
                                       for g, p in zip(gathered, probabilities, strict=True)])
        except Exception:  # a shadow score must never disturb the service (a failed log write included)
            log.exception("%s scoring failed", role)
