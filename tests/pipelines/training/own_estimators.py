"""Estimators a data scientist names by import path in a test (``own_estimators:scaled_logistic``)."""

from __future__ import annotations

from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler


def scaled_logistic(c: float = 1.0) -> Pipeline:
    """A scikit-learn Pipeline: standardization, then a class-weighted logistic regression."""
    return make_pipeline(StandardScaler(), LogisticRegression(C=c, class_weight="balanced", max_iter=2000))
