"""The demo's last step: replay the test split through the running service in time order, then
show what the model does on it, with samples chosen so that caught positives, a missed one and a
false alarm all appear when the model made them, and one line for the whole split. Outcomes are named
with the contract's decisions ("caught fraud", "missed fraud", "false alarm", "legit")."""

from __future__ import annotations

import httpx
import numpy as np
import pandas as pd

from mlops.contract import DataContract, Decisions
from mlops.errors import MLOpsError

BATCH = 200  # within the service's /predict/batch limit; a batch is answered in order
FALSE_ALARM = "false alarm"


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


def sample_quota(decisions: Decisions) -> dict[str, int]:
    """How many of each outcome the sample table shows (fewer when the model made fewer)."""
    return {f"caught {decisions.positive}": 3, f"missed {decisions.positive}": 1, FALSE_ALARM: 1,
            decisions.negative: 3}


def outcome(actual: int, decision: str, decisions: Decisions) -> str:
    positive = decisions.positive
    if actual:
        return f"caught {positive}" if decision == positive else f"missed {positive}"
    return FALSE_ALARM if decision == positive else decisions.negative


def with_outcomes(answered: pd.DataFrame, contract: DataContract) -> pd.DataFrame:
    outcomes = [outcome(int(a), str(d), contract.decisions)
                for a, d in zip(answered[contract.label_column], answered["decision"], strict=True)]
    return answered.assign(outcome=outcomes)


def pick_samples(answered: pd.DataFrame, contract: DataContract) -> pd.DataFrame:
    """The first few answers of each outcome (see :func:`sample_quota`), in time order."""
    picked = [answered[answered["outcome"] == kind].head(count)
              for kind, count in sample_quota(contract.decisions).items()]
    return pd.concat(picked).sort_values(contract.timestamp_column, kind="stable")


def summary_line(answered: pd.DataFrame, decisions: Decisions) -> str:
    counts = answered["outcome"].value_counts()
    positive = decisions.positive
    caught, missed, alarms = (int(counts.get(k, 0)) for k in (f"caught {positive}", f"missed {positive}", FALSE_ALARM))
    positives, negatives = caught + missed, len(answered) - caught - missed
    rate = f" ({caught / positives:.0%})" if positives else ""
    return (f"on the whole test split ({len(answered):,} rows) the service caught {caught} of {positives} "
            f"{positive}{rate} and raised {alarms} false alarms among {negatives:,} {decisions.negative}")
