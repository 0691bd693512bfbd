"""Traffic as the service scores it, for the monitoring tests and the drift benchmark.

Generator data with the window features the service computes (the same functions, event by event,
as the service's write-through does), scored by a fixed rule standing in for the model's
probability, so a shift in the inputs shifts the predictions, or by a model trained as the
pipeline trains it (``TrainedTraffic``), which reads the time features as the demo's model does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mlops.contract import DataContract
from mlops.data.generator import DEFAULT_START, Scenario, generate_transactions
from mlops.feature_replay import replay_features
from mlops.features import compute_features, to_micros
from mlops.histories import History, append_event, empty_history
from mlops.model import encode
from mlops.reference_profile import ReferenceProfile, build_profile
from mlops.settings import Settings
from pipelines.settings import PipelineSettings
from pipelines.steps.preprocess import time_split
from pipelines.training.trainer import TrainParams, train_model

# The monitoring conftest's fixtures: ``traffic``/``live`` (scenario -> frame), ``write_log``, ``register_profile``.
Traffic = Callable[[Scenario], pd.DataFrame]
LogWriter = Callable[..., None]
Registrar = Callable[[Settings, ReferenceProfile], str]


def served_features(raw: pd.DataFrame, contract: DataContract) -> pd.DataFrame:
    histories: dict[str, dict[str, History]] = {}
    for view in contract.feature_views:
        histories[view.view_name] = {}
    rows: list[dict[str, Any]] = []
    for record in raw.to_dict("records"):
        keys = {v.view_name: str(record[contract.entity(v.entity).join_key]) for v in contract.feature_views}
        current = {name: histories[name][key] for name, key in keys.items() if key in histories[name]}
        features = compute_features(contract, current, record["event_timestamp"],
                                    {"amount": float(record["amount"])})
        for view in contract.feature_views:
            known = current.get(view.view_name) or empty_history(view)
            updated = append_event(view, known, record["transaction_id"], to_micros(record["event_timestamp"]),
                                   {c: record[c] for c in view.value_columns})
            if updated is not None:
                histories[view.view_name][keys[view.view_name]] = updated
        rows.append({**{str(k): v for k, v in record.items()}, **features})
    return pd.DataFrame(rows)


def score(frame: pd.DataFrame) -> np.ndarray:
    """A fixed rule in place of a model: large amounts, fast bursts and risky shapes score high."""
    logit = (2.2 * (np.log1p(frame["amount"].to_numpy()) - 5.0) + 1.5 * frame["customer_txn_count_1h"].to_numpy()
             + 1.0 * (frame["channel"] == "online").to_numpy() - 2.5)
    return np.asarray(1 / (1 + np.exp(-logit)))


@dataclass(frozen=True)
class TrainedTraffic:
    """Generator runs of ``days`` days of one population (one seed, any scenario), a model trained on
    the first ``trained_days`` of the normal run as the pipeline trains it, and its reference profile
    built from the test split as the evaluate step builds it. ``after`` is the traffic after that."""

    contract: DataContract
    seed: int = 21
    days: int = 14
    trained_days: int = 11
    rows_per_hour: int = 100

    def run(self, scenario: Scenario) -> pd.DataFrame:
        raw = generate_transactions(self.rows_per_hour * 24 * self.days, seed=self.seed, days=self.days,
                                    scenario=scenario)
        frame = pd.concat([raw, replay_features(raw, self.contract)], axis=1)
        known = {c: set(self.contract.column(c).categories or ()) for c in self.contract.model_inputs.categorical}
        frame["unknown_categories"] = [[c for c in known if row[c] not in known[c]]
                                       for row in frame[list(known)].to_dict("records")]
        return frame

    @property
    def end_of_training(self) -> pd.Timestamp:
        return pd.Timestamp(DEFAULT_START) + pd.Timedelta(days=self.trained_days)

    def train(self, normal: pd.DataFrame) -> tuple[Callable[[pd.DataFrame], np.ndarray], ReferenceProfile]:
        """The scoring function of a model trained on the normal run's training days, and its reference."""
        splits = time_split(normal[normal["event_timestamp"] < self.end_of_training], self.contract)
        params = TrainParams.from_settings(PipelineSettings(seed=self.seed, max_epochs=8, patience=3, batch_size=512,
                                                            learning_rate=3e-3, device="cpu"))
        result = train_model(splits["train"], splits["validation"], self.contract, params)

        def scores(frame: pd.DataFrame) -> np.ndarray:
            return np.asarray(result.model.predict_proba(*encode(frame, self.contract, result.vocabs)))

        test = splits["test"]
        return scores, build_profile(test, self.contract, scores(test), result.threshold)

    def after(self, frame: pd.DataFrame, scores: Callable[[pd.DataFrame], np.ndarray],
              span: pd.Timedelta) -> pd.DataFrame:
        """The first ``span`` of traffic after the training days, scored."""
        start = self.end_of_training
        moments = frame["event_timestamp"]
        window = frame[(moments >= start) & (moments < start + span)].reset_index(drop=True)
        return window.assign(probability=scores(window))
