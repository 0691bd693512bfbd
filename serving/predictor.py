"""Scoring one request: online features from Feast, raw fields plus features into the ONNX graph.

The graph carries all preprocessing, so this module only gathers inputs: it never re-implements a
transformation the training code applies.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from pydantic import BaseModel

from mlops import registry
from mlops.contract import DataContract
from mlops.errors import ConfigError
from mlops.feature_store import online_features, open_store
from mlops.inference import OnnxModel
from mlops.settings import Settings

if TYPE_CHECKING:
    from feast import FeatureStore

log = logging.getLogger(__name__)


class Predictor:
    """One served model version and the feature store it reads; safe to call from many threads."""

    def __init__(
        self, contract: DataContract, store: FeatureStore, model: OnnxModel, served: registry.ServedModel
    ) -> None:
        self.contract = contract
        self.store = store
        self.model = model
        self.served = served
        self._raw_inputs = contract.raw_inputs
        self._join_keys = [e.join_key for e in contract.entities]
        # Feast's SQLite online store shares one connection between threads; the lookup is short,
        # so serialize it. InferenceSession.run is thread-safe and runs unlocked.
        self._store_lock = threading.Lock()
        unknown = sorted(set(model.input_names) - set(self._raw_inputs) - set(contract.feature_names))
        if unknown:
            raise ConfigError(f"model {served.name} v{served.version} expects inputs the contract "
                              f"does not provide: {unknown}")

    def features(self, request: BaseModel) -> pd.DataFrame:
        """One row of the contract's features for the request's entities (defaults when unknown)."""
        keys = {key: str(getattr(request, key)) for key in self._join_keys}
        with self._store_lock:
            features: pd.DataFrame = online_features(self.store, [keys], self.contract)
        return features

    def model_frame(self, request: BaseModel) -> pd.DataFrame:
        """The one-row table the graph scores: raw request fields, then the store's features."""
        raw = pd.DataFrame([request.model_dump(include=set(self._raw_inputs))], columns=self._raw_inputs)
        return pd.concat([raw, self.features(request).reset_index(drop=True)], axis=1)

    def predict(self, request: BaseModel) -> dict[str, Any]:
        """The response body for one validated request."""
        probability = float(self.model.predict_proba(self.model_frame(request))[0])
        threshold = self.model.threshold
        return {
            self.contract.id_column: getattr(request, self.contract.id_column),
            "probability": probability,
            "decision": "fraud" if probability >= threshold else "legit",
            "threshold": threshold,
            "model_name": self.served.name,
            "model_version": self.served.version,
        }


def load_predictor(settings: Settings, contract: DataContract, dest: Path) -> Predictor:
    """Download the model holding the serving alias into ``dest`` and open the feature store.

    Raises ModelNotReadyError when no version holds the alias yet.
    """
    served = registry.download_serving_model(settings, dest)
    model = OnnxModel(served.onnx_path)
    log.info("serving %s version %s (run %s) on %s", served.name, served.version, served.run_id,
             ", ".join(model.providers))
    return Predictor(contract, open_store(settings), model, served)
