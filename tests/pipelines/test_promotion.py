"""The promotion rule: noise models are rejected by the rule itself, truly better models promoted,
and the paired bootstrap equals a brute-force resampling of rows.

The models here are scikit-learn logistic regressions on the generator's raw fields (amount,
channel, country, merchant category): real learners, trained in milliseconds, with an F1-best
threshold chosen on a validation split as the training step chooses it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, f1_score

from mlops.data.generator import generate_transactions
from pipelines.steps.promotion import PromotionRule, decide, f1_from_counts, paired_f1_gain_interval
from pipelines.training.thresholds import best_f1_threshold

RULE = PromotionRule(margin=0.02)
ALL_FIELDS = ("channel", "country", "merchant_category")


class Model:
    """A logistic regression on one-hot raw fields, thresholded at its validation F1 optimum."""

    def __init__(self, train: pd.DataFrame, val: pd.DataFrame, fields: tuple[str, ...] = ALL_FIELDS) -> None:
        self.fields = fields
        self.columns = self._design(train).columns
        self.fit = LogisticRegression(max_iter=2_000, class_weight="balanced").fit(self._design(train),
                                                                                    train["is_fraud"])
        self.threshold = best_f1_threshold(val["is_fraud"].to_numpy(), self.proba(val))

    def proba(self, frame: pd.DataFrame) -> np.ndarray:
        design = self._design(frame).reindex(columns=self.columns, fill_value=0)
        return np.asarray(self.fit.predict_proba(design)[:, 1])

    def _design(self, frame: pd.DataFrame) -> pd.DataFrame:
        dummies = pd.get_dummies(frame[list(self.fields)], dtype="float64")
        return dummies.assign(log_amount=np.log1p(frame["amount"]))


def _splits(rows: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    frame = generate_transactions(rows, seed=seed, fraud_rate=0.019)
    n = len(frame)
    return frame.iloc[: int(n * 0.6)], frame.iloc[int(n * 0.6): int(n * 0.8)], frame.iloc[int(n * 0.8):]


def _decide(candidate: Model, production: Model | None, test: pd.DataFrame) -> tuple[str, str, float, float]:
    labels = test["is_fraud"].to_numpy()
    proba = candidate.proba(test)
    prod_proba = production.proba(test) if production else None
    prod_threshold = production.threshold if production else None
    decision, reason, _ = decide(labels, proba, candidate.threshold, float(average_precision_score(labels, proba)),
                                 prod_proba, prod_threshold, RULE)
    cand_f1 = float(f1_score(labels, proba >= candidate.threshold))
    prod_f1 = float(f1_score(labels, prod_proba >= prod_threshold)) if prod_proba is not None else 0.0
    return decision, reason, cand_f1, prod_f1


@pytest.fixture(scope="module")
def data() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return _splits(30_000, seed=5)


@pytest.fixture(scope="module")
def production(data: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]) -> Model:
    train, val, _ = data
    return Model(train, val)


@pytest.mark.integration
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_model_trained_on_shuffled_labels_is_rejected_by_the_baseline(
        data: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame], production: Model, seed: int) -> None:
    # The whole data set's labels shuffled, as a broken label join would: the candidate is trained,
    # thresholded and tested on them, and production (trained on the real labels) is tested on them too.
    rng = np.random.default_rng(seed)
    train, val, test = (split.assign(is_fraud=rng.permutation(split["is_fraud"].to_numpy())) for split in data)
    decision, reason, _, _ = _decide(Model(train, val), production, test)
    assert decision == "reject"
    assert "base rate" in reason
    assert "ranks no better than a constant score" in reason


@pytest.mark.integration
def test_a_truly_better_model_is_promoted_with_its_numbers(
        data: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]) -> None:
    train, val, test = data
    weak = Model(train.iloc[:3_000], val, fields=("channel",))  # fewer rows, and it sees less of the signal
    strong = Model(train, val)
    decision, reason, strong_f1, weak_f1 = _decide(strong, weak, test)
    assert strong_f1 > weak_f1
    assert decision == "promote", reason
    assert "lower bound >= margin 0.02" in reason
    assert f"{strong_f1 - weak_f1:+.4f}" in reason


@pytest.mark.integration
def test_an_equal_model_is_rejected_by_its_interval(data: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
                                                    production: Model) -> None:
    decision, reason, _, _ = _decide(production, production, data[2])
    assert decision == "reject"
    assert "interval [+0.0000, +0.0000]" in reason
    assert "lower bound below margin 0.02" in reason


@pytest.mark.integration
def test_without_production_the_baseline_still_decides(
        data: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame], production: Model) -> None:
    decision, reason, _, _ = _decide(production, None, data[2])
    assert decision == "promote"
    assert reason.startswith("no model in production yet; PR-AUC")
    constant = np.full(len(data[2]), 0.5)
    labels = data[2]["is_fraud"].to_numpy()
    refused = decide(labels, constant, 0.5, float(average_precision_score(labels, constant)), None, None, RULE)
    assert refused[0] == "reject"
    assert refused[2].pr_auc_lift == pytest.approx(1.0)


@pytest.mark.unit
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=60))
def test_f1_from_counts_is_scikit_learns(pairs: list[tuple[bool, bool]]) -> None:
    truth, flags = (np.array(column) for column in zip(*pairs, strict=True))
    tp, fp, fn = (np.sum(flags & truth), np.sum(flags & ~truth), np.sum(~flags & truth))
    assert f1_from_counts(np.array(tp), np.array(fp), np.array(fn)) == pytest.approx(
        f1_score(truth, flags, zero_division=0))


@pytest.mark.unit
def test_the_paired_bootstrap_equals_resampling_rows() -> None:
    rng = np.random.default_rng(9)
    labels = (rng.random(3_000) < 0.05).astype(int)
    candidate = (rng.random(3_000) < np.where(labels == 1, 0.7, 0.03)).astype(int)
    production = (rng.random(3_000) < np.where(labels == 1, 0.5, 0.03)).astype(int)
    low, high = paired_f1_gain_interval(labels, candidate, production, confidence=0.9, resamples=4_000, seed=1)
    rows = rng.integers(0, labels.size, (4_000, labels.size))  # each line: one resample of the rows

    def f1(flags: np.ndarray) -> np.ndarray:
        truth, flagged = labels[rows] == 1, flags[rows] == 1
        return f1_from_counts((truth & flagged).sum(axis=1), (~truth & flagged).sum(axis=1),
                              (truth & ~flagged).sum(axis=1))

    brute_low, brute_high = np.quantile(f1(candidate) - f1(production), [0.05, 0.95])
    # Two independent Monte Carlo runs of the same distribution: equal within their sampling error.
    assert low == pytest.approx(brute_low, abs=0.01)
    assert high == pytest.approx(brute_high, abs=0.01)
    assert low < high
