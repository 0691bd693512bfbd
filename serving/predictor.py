"""Scoring one request: entity histories from the online store, the window and time features at
the request's event time, the ONNX graph, then the write-through that records the transaction.

Features come from mlops.features, the same function training used; the graph carries all
preprocessing. So this module only gathers inputs and never re-implements a transformation.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from mlops import registry
from mlops.contract import DataContract
from mlops.errors import ConfigError, InputError
from mlops.feature_store import open_store
from mlops.features import compute_features, unknown_entities
from mlops.inference import OnnxModel
from mlops.online_features import OnlineFeatures
from mlops.prediction_log import PredictionLog, PredictionRecord, log_dir
from mlops.settings import Settings

if TYPE_CHECKING:
    from feast import FeatureStore

log = logging.getLogger(__name__)


class Predictor:
    """One served model version and the online features it reads; safe to call from many threads."""

    def __init__(self, contract: DataContract, store: FeatureStore, model: OnnxModel,
                 served: registry.ServedModel, *, prediction_log: PredictionLog,
                 max_clock_skew: timedelta) -> None:
        self.contract = contract
        self.online = OnlineFeatures(store, contract)
        self.model = model
        self.served = served
        self.prediction_log = prediction_log
        self.max_clock_skew = max_clock_skew
        self._raw_inputs = contract.raw_inputs
        self._join_keys = [e.join_key for e in contract.entities]
        self._value_columns = sorted({c for v in contract.feature_views for c in v.value_columns})
        self._categories = {name: set(contract.column(name).categories or ())
                            for name in contract.model_inputs.categorical}
        unknown = sorted(set(model.input_names) - set(self._raw_inputs) - set(contract.feature_names))
        if unknown:
            raise ConfigError(f"model {served.name} v{served.version} expects inputs the contract "
                              f"does not provide: {unknown}")

    def _event_time(self, request: BaseModel, received: datetime) -> datetime:
        given: datetime | None = getattr(request, self.contract.timestamp_column)
        if given is None:
            return received
        if given - received > self.max_clock_skew:
            raise InputError(f"{self.contract.timestamp_column} {given.isoformat()} lies more than "
                             f"{self.max_clock_skew.total_seconds():g} s in the future",
                             field=self.contract.timestamp_column)
        return given.astimezone(UTC)

    def predict(self, request: BaseModel) -> dict[str, Any]:
        """Score one validated request, record it in the online store and the log; the response body."""
        received = datetime.now(UTC)
        moment = self._event_time(request, received)
        event_id = str(getattr(request, self.contract.id_column))
        keys = {key: str(getattr(request, key)) for key in self._join_keys}
        inputs = request.model_dump(include=set(self._raw_inputs))
        with self.online.entities_locked(keys.items()):
            histories = self.online.read(keys)
            features = compute_features(self.contract, histories, moment)
            unknown = unknown_entities(self.contract, histories, moment)
            probability = float(self.model.predict_proba([{**inputs, **features}])[0])
            self.online.record(keys, histories, event_id, moment,
                               {c: float(getattr(request, c)) for c in self._value_columns})
        decision = "fraud" if probability >= self.model.threshold else "legit"
        unknown_categories = [name for name, known in self._categories.items() if inputs[name] not in known]
        self.prediction_log.append(PredictionRecord(
            event_id=event_id, event_timestamp=moment, logged_at=datetime.now(UTC), entities=keys,
            inputs=inputs, features=features, unknown_entities=unknown, unknown_categories=unknown_categories,
            probability=probability, decision=decision, model_name=self.served.name,
            model_version=self.served.version,
        ))
        return {
            self.contract.id_column: event_id,
            "probability": probability,
            "decision": decision,
            "threshold": self.model.threshold,
            "model_name": self.served.name,
            "model_version": self.served.version,
            self.contract.timestamp_column: moment,
            "unknown_entities": unknown,
            "unknown_categories": unknown_categories,
        }


def load_predictor(settings: Settings, contract: DataContract, dest: Path) -> Predictor:
    """Download the model holding the serving alias into ``dest`` and open the feature store.

    Raises ModelNotReadyError when no version holds the alias yet.
    """
    served = registry.download_serving_model(settings, dest)
    model = OnnxModel(served.onnx_path)
    log.info("serving %s version %s (run %s) on %s", served.name, served.version, served.run_id,
             ", ".join(model.providers))
    return Predictor(contract, open_store(settings), model, served,
                     prediction_log=PredictionLog(log_dir(settings)),
                     max_clock_skew=timedelta(seconds=settings.max_clock_skew_s))
