"""Drift levels by scenario and window size: the table in docs/monitoring-drift.md.

A model trained as the pipeline trains it on the first 11 days of a 14-day generator run of normal
traffic (100 rows an hour, seed 21; window features replayed event by event as the service computes
them), its reference profiled from the test split as the evaluate step profiles it. Each scenario is
the same population's run with that scenario; windows of 1 hour, 6 hours, 1 day and 3 days start
where training ends, as the traffic that follows the training data reaches the service.

    .venv/bin/python benchmarks/drift_windows.py [--rows-per-hour 100]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "monitoring"))
from served_traffic import TrainedTraffic

from mlops.contract import load_contract
from mlops.contracts import BUNDLED_CONTRACT
from mlops.data.generator import Scenario
from monitoring.drift import compute_drift

WINDOWS = {"1h": pd.Timedelta(hours=1), "6h": pd.Timedelta(hours=6), "1d": pd.Timedelta(days=1),
           "3d": pd.Timedelta(days=3)}
SCENARIOS: tuple[Scenario, ...] = ("none", "amount_inflation", "online_shift", "fraud_surge", "new_countries",
                                   "new_merchant_category")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-per-hour", type=int, default=100)
    contract = load_contract(BUNDLED_CONTRACT)
    generated = TrainedTraffic(contract, rows_per_hour=parser.parse_args().rows_per_hour)
    card = contract.entities[0].join_key  # categorical tests count each card once, as the drift job does
    started = time.perf_counter()
    normal = generated.run("none")
    scores, profile = generated.train(normal)
    print(f"trained; reference: {profile.rows:,} rows ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    print("| scenario | " + " | ".join(WINDOWS) + " |")
    print("|---|" + "---|" * len(WINDOWS))
    for scenario in SCENARIOS:
        run = normal if scenario == "none" else generated.run(scenario)
        cells = []
        for span in WINDOWS.values():
            report = compute_drift(generated.after(run, scores, span), profile, cluster=card)
            worst = sorted(report.flagged(), key=lambda f: -(f.score or 0))[:3]
            named = ", ".join(f.feature for f in worst)
            cells.append(f"{report.level} ({report.rows:,} rows{': ' + named if named else ''})")
        print(f"| {scenario} | " + " | ".join(cells) + " |", flush=True)
    print(f"total {time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
