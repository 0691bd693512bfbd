"""The Spark backfill and Spark scoring against the embedded engine, on data with a hot merchant.

Generated transactions (``--rows``, default 100,000) with ``--hot-share`` of the rows (default 30 %)
moved to one merchant. Runs the embedded backfill (the DuckDB engine where this tree has it, else the
per-event replay, ``mlops.features.replay_features``), then the Spark backfill in local mode, then
batch scoring of the same features with an exported (seeded, untrained) model on Spark and in process.
Prints wall time, peak resident memory of the process tree (Python plus Spark's JVM) and the largest
absolute difference of each Spark result from the embedded one.

    .venv/bin/python benchmarks/spark_backfill.py [--rows 100000] [--hot-share 0.3] [--cores 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import psutil

from mlops.contract import DataContract, load_contract
from mlops.contracts import BUNDLED_CONTRACT
from mlops.settings import Settings

HOT_MERCHANT = "M_HOT"


def with_hot_merchant(frame: pd.DataFrame, share: float, seed: int) -> pd.DataFrame:
    """``frame`` with ``share`` of its rows, drawn at random, moved to one merchant."""
    hot = frame.copy()
    hot.loc[np.random.default_rng(seed).random(len(hot)) < share, "merchant_id"] = HOT_MERCHANT
    return hot


def seeded_model_onnx(features: pd.DataFrame, contract: DataContract, path: Path) -> bytes:
    """An exported untrained model (seed 0) whose scaler saw ``features``: its scores vary row by row."""
    import torch

    from mlops.model import TabularMLP, encode, fit_vocabularies
    from mlops.onnx_export import export_onnx

    vocabs = fit_vocabularies(contract)
    torch.manual_seed(0)
    net = TabularMLP.for_contract(contract, vocabs)
    net.fit_scaler(encode(features, contract, vocabs)[0])
    return export_onnx(net.eval(), contract, vocabs, path, threshold=0.5, metadata={}).read_bytes()


class PeakMemory:
    """Peak resident memory of this process and its children (Spark's JVM), sampled every 50 ms."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()

    def _sample(self) -> None:
        me = psutil.Process()
        while True:
            total = 0
            for process in [me, *me.children(recursive=True)]:
                try:
                    total += process.memory_info().rss
                except psutil.NoSuchProcess:  # a worker that just ended
                    continue
            self.peak = max(self.peak, total)
            if self._stop.wait(0.05):
                return

    @contextmanager
    def watch(self) -> Iterator[PeakMemory]:
        self.peak, self._stop = 0, threading.Event()
        sampler = threading.Thread(target=self._sample, daemon=True)
        sampler.start()
        try:
            yield self
        finally:
            self._stop.set()
            sampler.join()


def _timed(label: str, work: Callable[[], object]) -> tuple[float, int]:
    print(f"{label} ...", flush=True)
    with PeakMemory().watch() as memory:
        start = time.perf_counter()
        work()
        wall = time.perf_counter() - start
    return wall, memory.peak


def _embedded_backfill(source: Path, out: Path, contract: DataContract) -> str:
    """The embedded engine's features of ``source`` written to ``out``; returns its name."""
    try:
        from mlops.backfill.engines import DuckDBEngine  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        from mlops.feature_replay import replay_features

        frame = pd.read_parquet(source)
        pd.concat([frame, replay_features(frame, contract)], axis=1).to_parquet(out, index=False)
        return "per-event replay"
    DuckDBEngine(Settings()).backfill(source, out, contract)
    return "DuckDB"


def _by_id(path: Path, columns: list[str]) -> pd.DataFrame:
    return pd.read_parquet(path).set_index("transaction_id").sort_index()[columns]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--hot-share", type=float, default=0.3)
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if not 0 <= args.hot_share <= 1 or args.rows < 100 or args.cores < 1:
        parser.error("--rows >= 100, 0 <= --hot-share <= 1, --cores >= 1")

    from pyspark.sql import SparkSession

    from mlops.backfill.interface import PROBABILITY
    from mlops.backfill.spark_engine import backfill_spark, load_onnx, score_spark
    from mlops.data.generator import generate_transactions

    contract = load_contract(BUNDLED_CONTRACT)
    work = Path(tempfile.mkdtemp(prefix="spark-backfill-"))
    frame = with_hot_merchant(generate_transactions(args.rows, seed=args.seed), args.hot_share, args.seed)
    source = work / "transactions.parquet"
    frame.to_parquet(source, index=False)
    hot_rows = int((frame["merchant_id"] == HOT_MERCHANT).sum())
    print(f"{len(frame):,} rows, {hot_rows:,} ({hot_rows / len(frame):.0%}) at one merchant; files in {work}")

    engine = "embedded"

    def embedded() -> None:
        nonlocal engine
        engine = _embedded_backfill(source, work / "embedded.parquet", contract)

    embedded_wall, embedded_peak = _timed("embedded backfill", embedded)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    start = time.perf_counter()
    spark = (SparkSession.builder.master(f"local[{args.cores}]").appName("spark-backfill-benchmark")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(2 * args.cores)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - start
    spark_wall, spark_peak = _timed("Spark backfill", lambda: backfill_spark(source, work / "spark", contract))

    names = contract.feature_names
    embedded_features, spark_features = _by_id(work / "embedded.parquet", names), _by_id(work / "spark", names)
    per_feature = (spark_features - embedded_features).abs().max()
    features = pd.read_parquet(work / "embedded.parquet")
    model_onnx = seeded_model_onnx(features, contract, work / "model.onnx")

    scored: dict[str, np.ndarray] = {}
    in_process_wall, in_process_peak = _timed(
        "in-process scoring", lambda: scored.setdefault("p", load_onnx(model_onnx).predict_proba(features)))
    expected = pd.Series(scored["p"].astype("float64"), index=features["transaction_id"]).sort_index()
    score_wall, score_peak = _timed(
        "Spark scoring", lambda: score_spark(work / "spark", model_onnx, work / "scored", contract))
    got = pd.read_parquet(work / "scored").set_index("transaction_id").sort_index()[PROBABILITY]
    spark.stop()

    print(f"\nSpark session start {startup:.1f} s (not counted below); local[{args.cores}]")
    print("| step | wall s | peak RSS MiB (process tree) | max abs difference from embedded |")
    print("|---|---|---|---|")
    print(f"| backfill, embedded ({engine}) | {embedded_wall:.1f} | {embedded_peak / 2**20:,.0f} | - |")
    print(f"| backfill, Spark | {spark_wall:.1f} | {spark_peak / 2**20:,.0f} | {per_feature.max():.3g} |")
    print(f"| scoring, in process | {in_process_wall:.1f} | {in_process_peak / 2**20:,.0f} | - |")
    print(f"| scoring, Spark | {score_wall:.1f} | {score_peak / 2**20:,.0f} | {(got - expected).abs().max():.3g} |")
    print("\nlargest difference per feature:")
    print(per_feature.to_string())


if __name__ == "__main__":
    main()
