"""Quality estimated without labels against the realized quality, for a demo home's production model on
the generator's traffic after the demo's data (not a test: it needs a trained home and a minute or two).

    .venv/bin/python benchmarks/estimated_quality_real.py [--home .mlops ...] [--rows 205000]
    .venv/bin/python benchmarks/estimated_quality_real.py --family mlp,xgboost [--homes .mlops-families]

``--home`` (repeatable) measures homes `mlops demo` trained (`make demo`: .mlops). ``--family`` trains a
home per family first, `mlops demo` with MLOPS_MODEL_FAMILY=<family> in <homes>/<family> (about two
minutes each), and reuses one that already has a production version.

The generator's stream of the demo's population (the rows and seed of the home's demo data) is replayed
through in-memory histories from the demo's first day, so every feature sees the history the service
would have; the rows after the demo's data are scored by the production version and cut into windows of
10,000 in time order. Per window: the estimate from the probabilities at the served threshold
(monitoring.estimated_quality) with its 95 % interval, and the realized value from the generator's
labels. Three readings of the probabilities: as served; through the reference's score map (the evaluate
step's held-out split); and as the drift job reads them once labels arrive, through the map the quality
job refits on the labelled traffic so far (window w through the labels of windows 0 to w-1: labels a
window late; the first window through the reference's map). Prints, per home and reading, how many
windows' realized value lies inside the interval, the mean absolute error and the mean bias; last, one
table of every home: its family and the calibration its training chose, and per reading and metric the
windows inside / the mean absolute error.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mlops import registry
from mlops.contract import DataContract, load_contract
from mlops.data.generator import generate_transactions
from mlops.feature_replay import replay_features
from mlops.inference import OnnxModel
from mlops.score_map import ScoreMap, fit_score_map
from mlops.settings import Settings
from monitoring.estimated_quality import METRICS, estimate_quality
from monitoring.labels import average_precision
from monitoring.references import fetch_profile

WINDOW = 10_000
DEMO_DAYS = 60  # the bundled generator spreads `mlops demo`'s rows over 60 days
DEMO_DATA = re.compile(r"-(\d+)-seed(\d+)\.parquet$")  # the demo's data file: <contract>-<rows>-seed<seed>.parquet
READINGS = ("as served", "through the reference's score map", "through the map refitted on the labelled traffic so far")


@dataclass(frozen=True)
class Reading:
    """One reading of one home: per metric, each window's (estimate, low, high, realized)."""

    figures: dict[str, list[tuple[float, float, float, float]]]

    @property
    def windows(self) -> int:
        return len(self.figures[METRICS[0]])

    def inside(self, metric: str) -> int:
        return sum(low <= value <= high for _, low, high, value in self.figures[metric])

    def error(self, metric: str) -> float:
        return float(np.mean([abs(value - guess) for guess, _, _, value in self.figures[metric]]))

    def bias(self, metric: str) -> float:
        """Realized minus estimated, on average."""
        return float(np.mean([value - guess for guess, _, _, value in self.figures[metric]]))


def realized(labels: np.ndarray, probabilities: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    tp = int(np.sum(labels & predicted))
    return {"precision": tp / max(int(predicted.sum()), 1), "recall": tp / max(int(labels.sum()), 1),
            "f1": 2 * tp / max(int(predicted.sum() + labels.sum()), 1),
            "pr_auc": average_precision(labels.astype("int64"), probabilities)}


def demo_data(settings: Settings, contract: DataContract) -> tuple[int, int, pd.Timestamp]:
    """The rows and seed of the demo data the home was trained on (its file's name), and its last moment."""
    found = sorted((path.stat().st_mtime, path, match) for path in (settings.resolved_home / "demo").glob(
        f"{contract.name}-*.parquet") if (match := DEMO_DATA.search(path.name)))
    if not found:
        sys.exit(f"{settings.resolved_home} holds no demo data: train it with MLOPS_HOME={settings.home} mlops demo")
    _, path, match = found[-1]  # the latest demo, where a home ran more than one
    stamps = pd.read_parquet(path, columns=[contract.timestamp_column])[contract.timestamp_column]
    return int(match.group(1)), int(match.group(2)), pd.Timestamp(stamps.max())


def traffic(contract: DataContract, demo_rows: int, seed: int, end_of_demo: pd.Timestamp, rows: int) -> pd.DataFrame:
    """The demo population's stream at the demo's rate of transactions a day, carried on past its last
    day, with every row's replayed features; only the rows after the demo's data."""
    days = int(np.ceil(DEMO_DAYS * (demo_rows + rows) / demo_rows))
    stream = generate_transactions(demo_rows + rows, seed=seed, days=days, population_rows=demo_rows)
    frame = pd.concat([stream, replay_features(stream, contract)], axis=1)
    return frame[frame[contract.timestamp_column] > end_of_demo].reset_index(drop=True)


def measure(probabilities: np.ndarray, labels: np.ndarray, threshold: float,
            maps: list[ScoreMap | None]) -> Reading:
    figures: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in METRICS}
    for window, score_map in enumerate(maps):
        part = slice(window * WINDOW, (window + 1) * WINDOW)
        predicted = probabilities[part] >= threshold
        estimate = estimate_quality(probabilities[part], predicted, score_map=score_map)
        truth = realized(labels[part], probabilities[part], predicted)
        for name in METRICS:
            interval = estimate.metric(name)
            figures[name].append((interval.estimate, interval.low, interval.high, truth[name]))
    return Reading(figures)


def measure_home(home: Path, rows: int,
                 streams: dict[tuple[int, int], pd.DataFrame]) -> tuple[str, str, dict[str, Reading]]:
    """The home's family, its chosen calibration and its three readings; ``streams`` keeps the traffic
    of each demo population, so homes trained on the same demo data share one replay."""
    settings = Settings(home=home)
    contract = load_contract(settings.contract_path)
    demo_rows, seed, end_of_demo = demo_data(settings, contract)
    after = streams.get((demo_rows, seed))
    if after is None:
        after = streams[(demo_rows, seed)] = traffic(contract, demo_rows, seed, end_of_demo, rows)
    served = registry.download_serving_model(settings, Path(tempfile.mkdtemp(prefix="estimate-")))
    params = registry.client(settings).get_run(served.run_id).data.params if served.run_id else {}
    family, calibration = params.get("model_family", "unrecorded"), params.get("calibration", "unrecorded")
    model = OnnxModel(served.onnx_path)
    probabilities = np.asarray(model.predict_proba(after), dtype="float64")
    labels = after[contract.label_column].to_numpy().astype(bool)
    windows = len(after) // WINDOW
    print(f"\n## {home}: {family}, calibration {calibration}, version {served.version}, threshold "
          f"{model.threshold:.3f}; {windows} windows of {WINDOW:,} rows after the demo's {demo_rows:,} rows "
          f"(positive rate {labels.mean():.4f})")
    score_map = fetch_profile(settings, settings.model_name, served.version).score_map
    print("score map: " + (f"isotonic over {score_map.rows:,} reference rows, {score_map.positives} positive"
                           if score_map else "none (the profile predates maps: every row read as served)"))
    labelled_so_far = [score_map] + [fit_score_map(probabilities[: w * WINDOW], labels[: w * WINDOW]) or score_map
                                     for w in range(1, windows)]
    maps: list[list[ScoreMap | None]] = [[None] * windows, [score_map] * windows, labelled_so_far]
    readings = {name: measure(probabilities, labels, model.threshold, each)
                for name, each in zip(READINGS, maps, strict=True)}
    for name, reading in readings.items():
        print(f"\nprobabilities read {name}")
        print("| metric | realized inside the 95 % interval | mean absolute error | mean realized - estimated |")
        print("|---|---|---|---|")
        for metric in METRICS:
            print(f"| {metric} | {reading.inside(metric)} of {reading.windows} | {reading.error(metric):.3f} | "
                  f"{reading.bias(metric):+.3f} |")
    return family, calibration, readings


def train_home(family: str, home: Path) -> None:
    """`mlops demo` with MLOPS_MODEL_FAMILY=``family`` into ``home``, unless it has a production version."""
    if home.exists() and registry.alias_version(Settings(home=home)) is not None:
        print(f"{family}: reusing {home}")
        return
    started = time.perf_counter()
    home.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MLOPS_HOME": str(home.resolve()), "MLOPS_MODEL_FAMILY": family}
    demo = subprocess.run([sys.executable, "-m", "mlops_cli", "demo"], env=env, cwd=home.parent,
                          capture_output=True, text=True, check=False)
    if demo.returncode != 0:
        sys.exit(f"`mlops demo` of {family} failed ({demo.returncode}):\n{demo.stdout[-3000:]}{demo.stderr[-3000:]}")
    print(f"{family}: trained {home} with `mlops demo` ({time.perf_counter() - started:.0f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, action="append", help="a trained home (repeatable; default .mlops)")
    parser.add_argument("--family", help="comma-separated families: train a home of each with `mlops demo`")
    parser.add_argument("--homes", type=Path, default=Path(".mlops-families"), help="where --family's homes go")
    parser.add_argument("--rows", type=int, default=205_000, help="traffic after the demo's data")
    args = parser.parse_args()
    started = time.perf_counter()
    homes = list(args.home or [])
    for family in (args.family.split(",") if args.family else []):
        train_home(family, args.homes / family / "home")
        homes.append(args.homes / family / "home")
    streams: dict[tuple[int, int], pd.DataFrame] = {}
    results = [measure_home(home, args.rows, streams) for home in homes or [Path(".mlops")]]
    print("\n## every home: realized inside the 95 % interval / mean absolute error")
    print(f"| family | calibration | probabilities read | {' | '.join(METRICS)} |")
    print("|---|---|---|" + "---|" * len(METRICS))
    for family, calibration, readings in results:
        for name, reading in readings.items():
            cells = [f"{reading.inside(m)} of {reading.windows} / {reading.error(m):.3f}" for m in METRICS]
            print(f"| {family} | {calibration} | {name} | {' | '.join(cells)} |")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
