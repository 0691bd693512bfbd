"""The demo's sample choice and summary line, against a brute-force count over random answers."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlops.contract import load_contract
from mlops.contracts import BUNDLED_CONTRACT
from pipelines.demo_replay import pick_samples, sample_quota, summary_line, with_outcomes

pytestmark = pytest.mark.unit

CONTRACT = load_contract(BUNDLED_CONTRACT)
answers = st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=60)


def _answered(pairs: list[tuple[bool, bool]]) -> pd.DataFrame:
    frame = pd.DataFrame({
        CONTRACT.timestamp_column: pd.date_range("2026-03-01", periods=len(pairs), freq="min", tz="UTC"),
        CONTRACT.label_column: [int(fraud) for fraud, _ in pairs],
        "decision": ["fraud" if flagged else "legit" for _, flagged in pairs],
    })
    return with_outcomes(frame, CONTRACT)


@settings(max_examples=60, deadline=None)
@given(answers)
def test_samples_hold_every_outcome_the_model_made_up_to_its_quota(pairs: list[tuple[bool, bool]]) -> None:
    answered = _answered(pairs)
    picked = pick_samples(answered, CONTRACT)
    names = {(True, True): "caught fraud", (True, False): "missed fraud", (False, True): "false alarm",
             (False, False): "legit"}
    made = [names[pair] for pair in pairs]
    for kind, quota in sample_quota(CONTRACT.decisions).items():
        assert (picked["outcome"] == kind).sum() == min(quota, made.count(kind))
    assert picked[CONTRACT.timestamp_column].is_monotonic_increasing


@settings(max_examples=60, deadline=None)
@given(answers)
def test_summary_counts_catches_and_false_alarms(pairs: list[tuple[bool, bool]]) -> None:
    line = summary_line(_answered(pairs), CONTRACT.decisions)
    caught = sum(fraud and flagged for fraud, flagged in pairs)
    frauds = sum(fraud for fraud, _ in pairs)
    alarms = sum(flagged and not fraud for fraud, flagged in pairs)
    found = re.search(r"\((\d+) rows\) the service caught (\d+) of (\d+) fraud.* raised (\d+) false alarms "
                      r"among (\d+) legit$", line)
    assert found is not None
    assert tuple(map(int, found.groups())) == (len(pairs), caught, frauds, alarms, len(pairs) - frauds)
