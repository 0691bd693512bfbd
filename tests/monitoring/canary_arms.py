"""The two arms of a canary as the service routes them, shared by the canary judge's tests."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

from mlops.contract import DataContract


def split_arms(frame: pd.DataFrame, contract: DataContract) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(canary, champion): a fifth of the customers on the canary, sticky as the service routes them."""
    on_canary = frame["customer_id"].map(lambda c: zlib.crc32(str(c).encode()) % 5 == 0)
    rng = np.random.default_rng(3)
    timed = frame.assign(latency_s=rng.gamma(4.0, 0.002, len(frame)))  # one latency profile for both arms
    return timed[on_canary].reset_index(drop=True), timed[~on_canary].reset_index(drop=True)
