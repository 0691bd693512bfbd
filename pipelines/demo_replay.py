"""The demo's last step: replay the test split through the running service in time order, then
show what the model does on it, with samples chosen so that caught frauds, a missed fraud and a
false alarm all appear when the model made them, and one line for the whole split."""

from __future__ import annotations

from typing import Literal

import httpx
import numpy as np
import pandas as pd

from mlops.contract import DataContract
from mlops.errors import MLOpsError

BATCH = 200  # within the service's /predict/batch limit; a batch is answered in order
# How many of each outcome the sample table shows (fewer when the model made fewer).
SAMPLES = {"caught fraud": 3, "missed fraud": 1, "false alarm": 1, "legit": 3}
Outcome = Literal["caught fraud", "missed fraud", "false alarm", "legit"]


def request_body(row: pd.Series, contract: DataContract) -> dict[str, object]:
    """The JSON body of a /predict request for one raw transaction row."""
    body: dict[str, object] = {}
    for field in contract.request_fields:
        value = row[field]
        body[field] = value.item() if isinstance(value, np.generic) else value
    body[contract.timestamp_column] = pd.Timestamp(row[contract.timestamp_column]).isoformat()
    return body


def replay(http: httpx.Client, test: pd.DataFrame, contract: DataContract) -> pd.DataFrame:
    """Every test transaction sent in time order (so each card's later transactions see its earlier
    ones); the split with the service's probability, decision, threshold and model version added."""
    ordered = test.sort_values(contract.timestamp_column, kind="stable").reset_index(drop=True)
    answers: list[dict[str, object]] = []
    for start in range(0, len(ordered), BATCH):
        chunk = ordered.iloc[start:start + BATCH]
        response = http.post("/predict/batch",
                             json={"instances": [request_body(row, contract) for _, row in chunk.iterrows()]})
        if response.status_code != 200:
            raise MLOpsError(f"the service answered {response.status_code} to the test split: {response.text[:300]}")
        answers += response.json()["predictions"]
    answered = pd.DataFrame(answers)[["probability", "decision", "threshold", "model_version"]]
    return pd.concat([ordered, answered], axis=1)


def outcome(actual: int, decision: str) -> Outcome:
    if actual:
        return "caught fraud" if decision == "fraud" else "missed fraud"
    return "false alarm" if decision == "fraud" else "legit"


def with_outcomes(answered: pd.DataFrame, contract: DataContract) -> pd.DataFrame:
    outcomes = [outcome(int(a), str(d)) for a, d in zip(answered[contract.label_column], answered["decision"],
                                                         strict=True)]
    return answered.assign(outcome=outcomes)


def pick_samples(answered: pd.DataFrame, contract: DataContract) -> pd.DataFrame:
    """The first few answers of each outcome (see SAMPLES), in time order."""
    picked = [answered[answered["outcome"] == kind].head(count) for kind, count in SAMPLES.items()]
    return pd.concat(picked).sort_values(contract.timestamp_column, kind="stable")


def summary_line(answered: pd.DataFrame) -> str:
    counts = answered["outcome"].value_counts()
    caught, missed, alarms = (int(counts.get(k, 0)) for k in ("caught fraud", "missed fraud", "false alarm"))
    frauds, legit = caught + missed, len(answered) - caught - missed
    rate = f" ({caught / frauds:.0%})" if frauds else ""
    return (f"on the whole test split ({len(answered):,} transactions) the service caught {caught} of {frauds} "
            f"frauds{rate} and raised {alarms} false alarms among {legit:,} legitimate transactions")
