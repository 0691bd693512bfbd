"""Model quality, online features and the prediction service before and after the feature
rewrite, side by side.

For each source tree (the commit before the rewrite, checked out into a temporary git worktree,
and this working tree) on the same generated data: run the pipeline and read the model's test
PR-AUC; unless --quality-only, materialize the online store where the tree has that command, time
the in-process feature fetch for one transaction (p50/p99), then start the service and measure
/predict latency (sequential) and requests/s (16 concurrent clients). Both trees run with this
checkout's .venv; PYTHONPATH picks the tree. All traffic stays on 127.0.0.1.

    .venv/bin/python benchmarks/features_before_after.py [--rows 8000] [--epochs 3] [--before a076e85]
    .venv/bin/python benchmarks/features_before_after.py --scenario night_fraud --rows 30000 --epochs 30 --quality-only
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
SEQUENTIAL_REQUESTS = 400
CONCURRENT_REQUESTS = 1200
CLIENTS = 16


def _tree(env: dict[str, str]) -> Path:
    """The source tree an environment runs (processes start there: `python -m` puts the cwd first)."""
    return Path(env["PYTHONPATH"].split(":")[-1])


def _env(tree: Path, home: Path, epochs: int) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{tree / 'platform'}:{tree}", "MLOPS_HOME": str(home),
            "MLOPS_MAX_EPOCHS": str(epochs)}


def _test_pr_auc(home: Path) -> float:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              order_by=["attributes.start_time DESC"], max_results=1)
    metrics = runs[0].data.metrics
    shown = {k: round(v, 4) for k, v in sorted(metrics.items())
             if k in {"test_f1", "test_pr_auc", "test_roc_auc", "test_ece", "test_brier"}}
    print(f"[{home.name}] test metrics: {shown}", flush=True)
    return float(metrics["test_pr_auc"])


def _cli(env: dict[str, str]) -> list[str]:
    """``-m`` and the tree's command-line module (mlops.cli before it became its own package)."""
    return ["-m", "mlops_cli" if (_tree(env) / "platform" / "mlops_cli").is_dir() else "mlops.cli"]


def _run(args: list[str], env: dict[str, str], log: Path) -> None:
    with log.open("ab") as out:
        done = subprocess.run([sys.executable, *args], env=env, cwd=_tree(env), stdout=out, stderr=subprocess.STDOUT,
                              check=False)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise SystemExit(f"{' '.join(args)} failed with exit code {done.returncode}; end of {log.name}:\n{tail}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _bodies(frame: pd.DataFrame, n: int, tag: str) -> list[dict[str, Any]]:
    rows = frame.tail(n).to_dict(orient="records")
    return [{"transaction_id": f"{tag}-{i}", "customer_id": r["customer_id"], "merchant_id": r["merchant_id"],
             "event_timestamp": pd.Timestamp(r["event_timestamp"]).isoformat(), "amount": float(r["amount"]),
             "merchant_category": r["merchant_category"], "channel": r["channel"], "country": r["country"]}
            for i, r in enumerate(rows)]


def _serve_and_load(env: dict[str, str], frame: pd.DataFrame, log: Path) -> dict[str, float]:
    port = _free_port()
    started = time.monotonic()
    with log.open("ab") as out:
        process = subprocess.Popen([sys.executable, *_cli(env), "serve"], env={**env, "MLOPS_PORT": str(port)},
                                   cwd=_tree(env), stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() - started > 180:
                raise RuntimeError(f"service did not start; see {log}")
            time.sleep(0.2)
        ready_s = time.monotonic() - started
        with httpx.Client(base_url=base, timeout=30) as http:
            latencies = []
            for body in _bodies(frame, SEQUENTIAL_REQUESTS, "seq"):
                t0 = time.perf_counter()
                http.post("/predict", json=body).raise_for_status()
                latencies.append(time.perf_counter() - t0)
        bodies = _bodies(frame, CONCURRENT_REQUESTS, "load")

        def send(chunk: list[dict[str, Any]]) -> None:
            with httpx.Client(base_url=base, timeout=30) as client:
                for body in chunk:
                    client.post("/predict", json=body).raise_for_status()

        t0 = time.perf_counter()
        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(send, [bodies[i::CLIENTS] for i in range(CLIENTS)]))
        rate = len(bodies) / (time.perf_counter() - t0)
    finally:
        process.terminate()
        process.wait(timeout=30)
    ms = np.asarray(latencies) * 1000
    return {"ready_s": ready_s, "predict_p50_ms": float(np.percentile(ms, 50)),
            "predict_p99_ms": float(np.percentile(ms, 99)), "requests_per_s": rate}


def measure(tree: Path, data: Path, work: Path, name: str, epochs: int, quality_only: bool) -> dict[str, float]:
    home = work / f"home-{name}"
    log = work / f"{name}.log"
    env = _env(tree, home, epochs)
    print(f"[{name}] pipeline on {data.name} (log: {log})", flush=True)
    _run([*_cli(env), "pipeline", "run", str(data)], env, log)
    if quality_only:
        return {"test_pr_auc": _test_pr_auc(home)}
    frame = pd.read_parquet(data).sort_values("event_timestamp")
    replay_from = frame["event_timestamp"].iloc[-CONCURRENT_REQUESTS - SEQUENTIAL_REQUESTS]
    if (tree / "platform" / "mlops" / "online_features.py").exists():
        as_of = (replay_from - pd.Timedelta(microseconds=1)).isoformat()
        _run([*_cli(env), "features", "materialize", "--end", as_of], env, log)
    probe = subprocess.run([sys.executable, str(REPO / "benchmarks" / "feature_fetch_probe.py"), str(data), "500"],
                           env=env, cwd=tree, capture_output=True, text=True, check=True)
    result: dict[str, float] = {"test_pr_auc": _test_pr_auc(home),
                                **json.loads(probe.stdout.strip().splitlines()[-1])}
    print(f"[{name}] service under load", flush=True)
    result.update(_serve_and_load(env, frame, log))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=8000)
    parser.add_argument("--epochs", type=int, default=3, help="MLOPS_MAX_EPOCHS for both pipelines")
    parser.add_argument("--scenario", default="none", help="generator scenario (e.g. night_fraud)")
    parser.add_argument("--quality-only", action="store_true", help="only the models' test PR-AUC")
    parser.add_argument("--before", default="a076e85", help="commit before the feature rewrite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="features-bench-") as tmp:
        work = Path(tmp)
        before_tree = work / "before"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(before_tree), args.before],
                       check=True)
        try:
            data = work / "transactions.parquet"
            generating = _env(REPO, work / "gen", args.epochs)
            _run([*_cli(generating), "data", "generate", "--out", str(data), "--rows", str(args.rows),
                  "--scenario", args.scenario], generating, work / "generate.log")
            results = {side: measure(tree, data, work, side, args.epochs, args.quality_only)
                       for side, tree in (("before", before_tree), ("after", REPO))}
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(before_tree)], check=False)
    print(f"\n{args.rows:,} rows, scenario {args.scenario}, {args.epochs} epochs")
    print(f"{'metric':<22}{'before':>12}{'after':>12}{'after/before':>14}")
    for key in results["before"]:
        before, after = results["before"][key], results["after"][key]
        print(f"{key:<22}{before:>12.4g}{after:>12.4g}{after / before:>14.3g}")


if __name__ == "__main__":
    main()
