"""Calibration chosen per model (issue 40, point 3): for each family, what ``MLOPS_CALIBRATION=auto``
picks on validation (each map's out-of-fold log loss) and each map's ECE and top-decile ECE on the test
split, side by side. docs/own-model.md quotes the table.

The data is the generated card data with the contract's features (70/15/15 % of the rows by time, 3 %
positives); one fit per family with its defaults (``torch``: the example module of the tests), then
each map fitted to that fit's validation logits and judged on the test split.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/calibration_choice.py [--rows 30000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
from threadpoolctl import threadpool_limits

from mlops.calibration import calibration_report, top_decile_ece
from mlops.contract import load_contract
from mlops.data.generator import generate_transactions
from mlops.feature_replay import replay_features
from pipelines.settings import PipelineSettings
from pipelines.training.calibrators import METHODS, fit_method
from pipelines.training.families.bundled import family_for
from pipelines.training.families.converted import logit

# The example module a data scientist would write (tests/pipelines/training/user_nets.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "pipelines" / "training"))
FAMILIES: dict[str, dict[str, object]] = {"mlp": {}, "torch": {"module": "user_nets:Wide"}, "xgboost": {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=30_000)
    args = parser.parse_args()
    settings = PipelineSettings(device="cpu")
    contract = load_contract(settings.contract_path)
    raw = generate_transactions(args.rows, seed=3, fraud_rate=0.03)
    frame = pd.concat([raw, replay_features(raw, contract)], axis=1)
    n = len(frame)
    train, val, test = frame.iloc[:int(n * 0.7)], frame.iloc[int(n * 0.7):int(n * 0.85)], frame.iloc[int(n * 0.85):]
    y_val, y_test = (split[contract.label_column].to_numpy().astype(int) for split in (val, test))
    print(f"rows {len(train)} / {len(val)} / {len(test)}; positives in validation {y_val.sum()}, test {y_test.sum()}")
    print("| family | fit wall | auto chose | out-of-fold log loss none / platt / isotonic "
          "| test ECE none / platt / isotonic | test top-decile ECE none / platt / isotonic |")
    print("|---|---:|---|---|---|---|")
    for family, params in FAMILIES.items():
        with threadpool_limits(limits=1):
            started = time.monotonic()
            fitted, summary = family_for(settings.model_copy(update={"model_family": family,
                                                                     "model_params": params})).fit(train, val, contract)
            wall = time.monotonic() - started
        assert summary.calibration is not None
        z_val, z_test = (logit(fitted.uncalibrated_probability(split)) for split in (val, test))
        tested = {method: fit_method(method, z_val, y_val).apply(z_test) for method in METHODS}
        losses = " / ".join(f"{summary.calibration.log_loss[m]:.4f}" for m in METHODS)
        eces = " / ".join(f"{calibration_report(y_test, tested[m]).ece:.4f}" for m in METHODS)
        tops = " / ".join(f"{top_decile_ece(y_test, tested[m]):.4f}" for m in METHODS)
        print(f"| `{family}` | {wall:.1f} s | {summary.calibration.method} | {losses} | {eces} | {tops} |")


if __name__ == "__main__":
    main()
