"""Drift levels by scenario and window size: the table in docs/monitoring-drift.md.

Each scenario is an 11-day generator run (seed 21), its window features computed event by event
as the service computes them, scored by the monitoring tests' fixed rule. The reference is days
5-8 of the normal run, profiled as the evaluate step profiles a test split; windows of 1 hour,
6 hours, 1 day and 3 days end at each run's newest event (days 8-11): the same customers and
merchants, later traffic, as production sees after training. The first 5 days only warm up the
entities' histories (7-day means), as production traffic arrives with the online store filled.

A run of another seed is another population (at 100 rows an hour, 176 merchants): its merchant
mix and merchant means differ for real, and the tests call that significant; see
docs/monitoring-drift.md.

    .venv/bin/python benchmarks/drift_windows.py [--rows-per-hour 100]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "monitoring"))
from served_traffic import score, served_features

from mlops.contract import DataContract, load_contract
from mlops.data.generator import Scenario, generate_transactions
from mlops.reference_profile import build_profile
from mlops.settings import BUNDLED_CONTRACT
from monitoring.drift import compute_drift

DAYS = 11
SEED = 21
WINDOWS = {"1h": pd.Timedelta(hours=1), "6h": pd.Timedelta(hours=6), "1d": pd.Timedelta(days=1),
           "3d": pd.Timedelta(days=3)}
SCENARIOS: tuple[Scenario, ...] = ("none", "amount_inflation", "online_shift", "fraud_surge", "new_countries",
                                   "new_merchant_category")


def traffic(contract: DataContract, scenario: Scenario, seed: int, rows: int) -> pd.DataFrame:
    raw = generate_transactions(rows, seed=seed, days=DAYS, scenario=scenario)
    frame: pd.DataFrame = served_features(raw, contract)
    frame["probability"] = score(frame)
    known = {c: set(contract.column(c).categories or ()) for c in contract.model_inputs.categorical}
    frame["unknown_categories"] = [[c for c in known if row[c] not in known[c]]
                                   for row in frame[list(known)].to_dict("records")]
    return frame


def newest(frame: pd.DataFrame, span: pd.Timedelta) -> pd.DataFrame:
    end = frame["event_timestamp"].max()
    window: pd.DataFrame = frame[frame["event_timestamp"] > end - span].reset_index(drop=True)
    return window


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-per-hour", type=int, default=100)
    rows = parser.parse_args().rows_per_hour * 24 * DAYS
    contract = load_contract(BUNDLED_CONTRACT)
    started = time.perf_counter()
    normal = traffic(contract, "none", SEED, rows)
    end = normal["event_timestamp"].max() - WINDOWS["3d"]
    reference_rows = normal[(normal["event_timestamp"] <= end) & (normal["event_timestamp"] > end - WINDOWS["3d"])]
    profile = build_profile(reference_rows, contract, reference_rows["probability"].to_numpy())
    print(f"reference: {len(reference_rows):,} rows over 3 days ({time.perf_counter() - started:.0f} s)",
          file=sys.stderr)
    print("| scenario | " + " | ".join(WINDOWS) + " |")
    print("|---|" + "---|" * len(WINDOWS))
    for scenario in SCENARIOS:
        live = normal if scenario == "none" else traffic(contract, scenario, SEED, rows)
        cells = []
        for span in WINDOWS.values():
            report = compute_drift(newest(live, span), profile)
            worst = sorted(report.flagged(), key=lambda f: -(f.score or 0))[:3]
            named = ", ".join(f.feature for f in worst)
            cells.append(f"{report.level} ({report.rows:,} rows{': ' + named if named else ''})")
        print(f"| {scenario} | " + " | ".join(cells) + " |", flush=True)
    print(f"total {time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
