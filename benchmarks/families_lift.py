"""What the feature families add on the terminal-payments example: test PR-AUC with the window
features only, with every family the example contract uses, and with the contract `mlops contract
draft` writes for the data (unedited), side by side on the same data.

The window-only contract is the example contract with its family features removed (label features
with a delay, ratios and z-scores, novelty and variety), so the two runs differ in nothing else.
Each run is `mlops pipeline run` (inline runner) in its own home; the metrics are read back from its
MLflow run. One run, a table (docs/own-data.md quotes it).

    .venv/bin/python benchmarks/families_lift.py [--rows 200000] [--epochs 12] [--seeds 1 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "platform" / "mlops" / "contracts" / "terminals.yaml"
WINDOW_AGGS = {"count", "mean", "max", "sum", "seconds_since_previous"}
SHOWN = ("test_pr_auc", "test_roc_auc", "test_f1")


def window_only(contract: dict[str, object]) -> dict[str, object]:
    """The contract without its family features (and without log1p marks on them)."""
    views = [{**view, "features": [f for f in view["features"] if f["agg"] in WINDOW_AGGS]}
             for view in contract["feature_views"]]  # type: ignore[attr-defined]
    kept = {f["name"] for view in views for f in view["features"]}
    inputs = dict(contract["model_inputs"])  # type: ignore[call-overload]
    inputs["log1p_features"] = [n for n in inputs.get("log1p_features", []) if n in kept]
    return {**contract, "feature_views": views, "model_inputs": inputs}


def _mlops(args: list[str], env: dict[str, str], log: Path) -> None:
    with log.open("ab") as out:
        done = subprocess.run([sys.executable, "-m", "mlops_cli", *args], env=env, cwd=REPO, stdout=out,
                              stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise SystemExit(f"mlops {' '.join(args)} failed ({done.returncode}); end of {log}:\n{tail}")


def _metrics(home: Path) -> dict[str, float]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              filter_string="metrics.test_pr_auc > -1", max_results=1)
    return {k: float(runs[0].data.metrics[k]) for k in SHOWN}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    args = parser.parse_args()
    example = yaml.safe_load(EXAMPLE.read_text())
    work = Path(tempfile.mkdtemp(prefix="families-lift-"))
    contracts = {"window features only": window_only(example), "with the families": example}
    rows: list[tuple[int, str, dict[str, float], float]] = []
    for seed in args.seeds:
        data = work / f"payments-{seed}.parquet"
        base = {**os.environ, "MLOPS_MAX_EPOCHS": str(args.epochs), "MLOPS_CONTRACT_PATH": str(EXAMPLE)}
        _mlops(["data", "generate", "--out", str(data), "--rows", str(args.rows), "--seed", str(seed)],
               {**base, "MLOPS_HOME": str(work / "gen")}, work / "generate.log")
        drafted = work / f"{seed}-drafted.yaml"
        _mlops(["contract", "draft", str(data), "--out", str(drafted)], base, work / "draft.log")
        contracts["drafted, unedited"] = yaml.safe_load(drafted.read_text())
        for number, (label, contract) in enumerate(contracts.items()):
            home = work / f"{seed}-{number}"
            path = home.with_suffix(".yaml")
            path.write_text(yaml.safe_dump(contract, sort_keys=False))
            env = {**base, "MLOPS_HOME": str(home), "MLOPS_CONTRACT_PATH": str(path)}
            started = time.perf_counter()
            _mlops(["pipeline", "run", str(data), "--runner", "inline"], env, work / f"{home.name}.log")
            rows.append((seed, label, _metrics(home), time.perf_counter() - started))
            print(f"seed {seed}, {label}: {rows[-1][2]} in {rows[-1][3]:.0f} s", flush=True)
    print(f"\nterminal-payments, {args.rows:,} rows, {args.epochs} epochs (work in {work})\n")
    print("| seed | contract | test PR-AUC | test ROC AUC | test F1 | pipeline s |")
    print("|---|---|---|---|---|---|")
    for seed, label, metrics, seconds in rows:
        print(f"| {seed} | {label} | {metrics['test_pr_auc']:.3f} | {metrics['test_roc_auc']:.3f} | "
              f"{metrics['test_f1']:.3f} | {seconds:.0f} |")


if __name__ == "__main__":
    main()
