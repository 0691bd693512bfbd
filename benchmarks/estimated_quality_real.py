"""Quality estimated without labels against the realized quality, for the demo's own model on the
generator's traffic after the demo's data (not a test: it needs `make demo` first and a minute).

    .venv/bin/python benchmarks/estimated_quality_real.py [--home .mlops] [--rows 205000]

The generator's stream of the demo's population (seed 42) is replayed through in-memory histories
from the demo's first day, so every feature sees the history the service would have; the rows after
the demo's data are scored by the production version and cut into windows of 10,000 in time order.
Per window: the estimate from the probabilities at the served threshold (monitoring.estimated_quality)
with its 95 % interval, and the realized value from the generator's labels. Three readings of the
probabilities: as served; through the reference's score map (the evaluate step's held-out split);
and as the drift job reads them once labels arrive, through the map the quality job refits on the
labelled traffic so far (window w through the labels of windows 0 to w-1: labels a window late; the
first window through the reference's map). Prints, per metric, how
many windows' realized value lies inside the interval, the mean absolute error and the mean bias.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from mlops import registry
from mlops.contract import load_contract
from mlops.data.generator import generate_transactions
from mlops.feature_replay import replay_features
from mlops.inference import OnnxModel
from mlops.score_map import ScoreMap, fit_score_map
from mlops.settings import Settings
from monitoring.estimated_quality import METRICS, estimate_quality
from monitoring.labels import average_precision
from monitoring.references import fetch_profile

WINDOW = 10_000
DEMO_ROWS, DEMO_DAYS = 30_000, 60  # `make demo`'s data: 30,000 transactions over 60 days, seed 42


def realized(labels: np.ndarray, probabilities: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    tp = int(np.sum(labels & predicted))
    return {"precision": tp / max(int(predicted.sum()), 1), "recall": tp / max(int(labels.sum()), 1),
            "f1": 2 * tp / max(int(predicted.sum() + labels.sum()), 1),
            "pr_auc": average_precision(labels.astype("int64"), probabilities)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, default=Path(".mlops"))
    parser.add_argument("--rows", type=int, default=205_000, help="traffic after the demo's data")
    args = parser.parse_args()
    started = time.perf_counter()
    settings = Settings(home=args.home)
    contract = load_contract(settings.contract_path)
    # The same rate of transactions a day as the demo's data, carried on past its last day.
    days = int(np.ceil(DEMO_DAYS * (DEMO_ROWS + args.rows) / DEMO_ROWS))
    stream = generate_transactions(DEMO_ROWS + args.rows, seed=42, days=days, population_rows=DEMO_ROWS)
    frame = pd.concat([stream, replay_features(stream, contract)], axis=1)
    demo = generate_transactions(DEMO_ROWS, seed=42, days=DEMO_DAYS)
    end_of_demo = pd.Timestamp(demo[contract.timestamp_column].max())
    after = frame[frame[contract.timestamp_column] > end_of_demo].reset_index(drop=True)
    served = registry.download_serving_model(settings, Path(tempfile.mkdtemp(prefix="estimate-")))
    model = OnnxModel(served.onnx_path)
    probabilities = np.asarray(model.predict_proba(after), dtype="float64")
    labels = after[contract.label_column].to_numpy().astype(bool)
    windows = len(after) // WINDOW
    print(f"version {served.version}, threshold {model.threshold:.3f}; {windows} windows of {WINDOW:,} rows after "
          f"the demo's data (positive rate {labels.mean():.4f})")
    score_map = fetch_profile(settings, settings.model_name, served.version).score_map
    print("score map: " + (f"isotonic over {score_map.rows:,} reference rows, {score_map.positives} positive"
                           if score_map else "none (the profile predates maps: every row read as served)"))
    labelled_so_far = [score_map] + [fit_score_map(probabilities[: w * WINDOW], labels[: w * WINDOW]) or score_map
                                     for w in range(1, windows)]
    readings: dict[str, list[ScoreMap | None]] = {
        "as served": [None] * windows, "through the reference's score map": [score_map] * windows,
        "through the map refitted on the labelled traffic so far": labelled_so_far}
    for reading, maps in readings.items():
        figures: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in METRICS}
        for window in range(windows):
            part = slice(window * WINDOW, (window + 1) * WINDOW)
            predicted = probabilities[part] >= model.threshold
            estimate = estimate_quality(probabilities[part], predicted, score_map=maps[window])
            truth = realized(labels[part], probabilities[part], predicted)
            for name in METRICS:
                interval = estimate.metric(name)
                figures[name].append((interval.estimate, interval.low, interval.high, truth[name]))
        print(f"\nprobabilities read {reading}")
        print("| metric | realized inside the 95 % interval | mean absolute error | mean realized - estimated |")
        print("|---|---|---|---|")
        for name, rows in figures.items():
            inside = sum(low <= value <= high for _, low, high, value in rows)
            error = float(np.mean([abs(value - guess) for guess, _, _, value in rows]))
            bias = float(np.mean([value - guess for guess, _, _, value in rows]))
            print(f"| {name} | {inside} of {len(rows)} | {error:.3f} | {bias:+.3f} |")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
