"""Every model family side by side on the same splits of each bundled example: train wall, peak memory,
test PR-AUC and ROC AUC of the exported graph, its ONNX size, and how fast it scores one row at a time.

For each bundled example (card transactions; terminal payments), the example's own generator writes
``--rows`` rows (with ``--hot merchant_id=0.3``, 30 % of them moved onto one merchant); the pipeline's
backfill computes every row's features, and the rows split by time as the pipeline splits them
(70/15/15 %). Each family then runs in its own
process on those same three files: it reads them, fits on train (early stopping and calibration on
validation), exports the served ONNX graph (preprocessing and calibration inside) with its parity
check, and scores the test split with that graph. Peak RSS is that process's (Python, libraries, the
splits, the fit and the export). "1-row calls/s" is the served graph in process (onnxruntime through
the service's own ``OnnxModel``, one row per call as /predict sends it), not the HTTP service.

The families and their parameters (the defaults a data scientist starts from):

- ``mlp``: the built-in network (``MLOPS_MAX_EPOCHS``, default 30, early stopping);
- ``xgboost``: hist trees, early stopping on validation PR-AUC;
- ``sklearn`` HistGradientBoostingClassifier, and a StandardScaler + LogisticRegression Pipeline
  (``own_estimators:scaled_logistic``, tests/pipelines/training/own_estimators.py);
- ``torch``: a user's module (``user_nets:Wide``, tests/pipelines/training/user_nets.py) in the
  platform's loop.

``--short`` is a smoke run (few rows, few rounds and epochs, 1-row calls for a fifth of a second): it
keeps the benchmark working, its figures mean nothing. It fits every family in the benchmark's own
process, through the same :func:`_fit`, rather than one process each: a family's process spends most
of its time importing torch, MLflow, xgboost and skl2onnx, which ten processes would do ten times. So
its peak RSS is the benchmark process's so far (every earlier family's and example's included), not the
family's; a full run keeps the process per family because that figure is the one it reports.

    .venv/bin/python benchmarks/model_families.py [--rows 100000] [--examples card-transactions terminal-payments]
        [--hot merchant_id=0.3]
    .venv/bin/python benchmarks/model_families.py --short
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The modules a data scientist would write, named by import path (as in the tests).
OWN_MODULES = REPO / "tests" / "pipelines" / "training"
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "mlp": ("mlp", {}),
    "xgboost": ("xgboost", {}),
    "sklearn HistGradientBoosting": ("sklearn", {"estimator": "sklearn.ensemble.HistGradientBoostingClassifier"}),
    "sklearn LogisticRegression pipeline": ("sklearn", {"estimator": "own_estimators:scaled_logistic"}),
    "torch user_nets:Wide": ("torch", {"module": "user_nets:Wide"}),
}
# --short: few rounds and epochs, only to keep the benchmark running.
SHORT_PARAMS: dict[str, dict[str, Any]] = {"xgboost": {"n_estimators": 20},
                                           "sklearn HistGradientBoosting": {"max_iter": 20}}
SHORT_EPOCHS = 2
# --short rows per example: the terminal payments are about 1 % fraud, so they need more rows for a few
# dozen positives per split (fewer leave a tree with tied scores at its threshold).
SHORT_ROWS = {"card-transactions": 3_000, "terminal-payments": 12_000}
COLUMNS = ("family", "train wall s", "peak RSS MB", "test PR-AUC", "test ROC AUC", "ONNX KB", "1-row calls/s")
SCORING_CALLS = 2_000
SCORING_SECONDS = 2.0  # 1-row calls for this long, cycling over the first SCORING_CALLS test rows
SHORT_SCORING_SECONDS = 0.2  # --short: enough calls to show the graph scores rows one at a time


def _concentrate(raw_path: Path, column: str, share: float, seed: int) -> None:
    """Give ``share`` of the rows, drawn at random, one value of ``column`` (one hot merchant, say)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(raw_path)
    hot = pa.array(np.random.default_rng(seed).random(table.num_rows) < share)
    values = table[column]
    hot_value = pa.scalar(f"{column}-HOT" if pa.types.is_string(values.type) else pc.max(values).as_py() + 1,
                          values.type)
    pq.write_table(table.set_column(table.schema.get_field_index(column), column,
                                    pc.if_else(hot, hot_value, values)), raw_path)


def _splits(example: str, rows: int, seed: int, folder: Path, hot: tuple[str, float] | None) -> dict[str, int]:
    """The example's rows with their features, split by time into ``folder``/<split>.parquet.

    Features come from the pipeline's own backfill (DuckDB; tests hold it equal to the online
    replay), which keeps a million rows with one entity holding 30 % of them a matter of seconds.
    """
    import pandas as pd

    from mlops.backfill import backfill_features
    from mlops.contract import load_contract
    from mlops.data.examples import EXAMPLES
    from mlops.settings import Settings
    from pipelines.steps.preprocess import time_split

    path, generate = EXAMPLES[example]
    contract = load_contract(path)
    raw_path, features_path = folder / "raw.parquet", folder / "features.parquet"
    generate(raw_path, rows, contract, seed=seed, scenario="none", fraud_rate=0.03)
    if hot is not None:
        _concentrate(raw_path, *hot, seed=seed)
    backfill_features(raw_path, features_path, contract, Settings(contract_path=path, home=folder / "home"))
    frame = pd.read_parquet(features_path)
    counts = {}
    for name, split in time_split(frame, contract).items():
        split.to_parquet(folder / f"{name}.parquet", index=False)
        counts[name] = len(split)
        counts[f"{name} positives"] = int(split[contract.label_column].sum())
    return counts


def _fit(example: str, label: str, folder: Path, short: bool) -> dict[str, float]:
    """One family in this process: fit, export with parity, score the test split with the served graph."""
    import numpy as np
    import pandas as pd
    from sklearn.metrics import average_precision_score, roc_auc_score

    from mlops.contract import load_contract
    from mlops.data.examples import EXAMPLES
    from mlops.inference import OnnxModel
    from pipelines.settings import PipelineSettings
    from pipelines.training.export import export_and_check
    from pipelines.training.families.bundled import family_for

    if str(OWN_MODULES) not in sys.path:  # --short fits every family in one process
        sys.path.insert(0, str(OWN_MODULES))
    family, params = FAMILIES[label]
    overrides: dict[str, Any] = {"device": "cpu", "contract_path": EXAMPLES[example][0], "model_family": family,
                                 "model_params": {**params, **(SHORT_PARAMS.get(label, {}) if short else {})}}
    if short:
        overrides["max_epochs"] = SHORT_EPOCHS
    settings = PipelineSettings(**overrides)
    contract = load_contract(settings.contract_path)
    train, validation, test = (pd.read_parquet(folder / f"{name}.parquet") for name in ("train", "validation", "test"))
    started = time.perf_counter()
    fitted, _ = family_for(settings).fit(train, validation, contract)
    wall = time.perf_counter() - started
    export = export_and_check(fitted, contract, test, folder / label.replace(" ", "_").replace(":", "_"),
                              settings.parity_tolerance, metadata={"model_name": "families-benchmark"})
    model = OnnxModel(export.onnx_path)
    labels = test[contract.label_column].to_numpy().astype(int)
    scores = model.predict_proba(test)
    records = [{str(k): v for k, v in row.items()}
               for row in test[model.input_names].head(SCORING_CALLS).to_dict("records")]
    model.predict_proba(records[:1])  # warm
    calls, began, seconds = 0, time.perf_counter(), SHORT_SCORING_SECONDS if short else SCORING_SECONDS
    while time.perf_counter() - began < seconds:
        model.predict_proba([records[calls % len(records)]])
        calls += 1
    rate = calls / (time.perf_counter() - began)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux
    return {"train wall s": wall, "peak RSS MB": peak_kb / 1024, "test PR-AUC": float(average_precision_score(
        labels, scores)), "test ROC AUC": float(roc_auc_score(labels, scores)),
        "ONNX KB": export.onnx_path.stat().st_size / 1024, "1-row calls/s": rate,
        "parity max abs diff": float(np.float64(export.max_abs_diff))}


def _run_family(example: str, label: str, folder: Path) -> dict[str, float] | str:
    """:func:`_fit` in a process of its own, so its peak memory is its own; the error's last line if it failed."""
    command = [sys.executable, __file__, "--fit", label, "--example", example, "--folder", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [str(REPO / "platform"), str(REPO), os.environ.get("PYTHONPATH", "")])}, check=False)
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        return (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _fit_here(example: str, label: str, folder: Path) -> dict[str, float] | str:
    """:func:`_fit` in this process (--short); the error's last line if it failed, as :func:`_run_family`
    says it, so that one family's failure still leaves the others' rows."""
    try:
        return _fit(example, label, folder, short=True)
    except Exception as exc:  # noqa: BLE001 - any failure of a family is a table row, as a child's exit code is
        traceback.print_exc()
        return (f"{type(exc).__name__}: {exc}".strip().splitlines() or [type(exc).__name__])[-1]


def _cell(name: str, value: float) -> str:
    if name in ("test PR-AUC", "test ROC AUC"):
        return f"{value:.4f}"
    if name == "train wall s":  # in hundredths: --short fits in a warm process, some in under 0.05 s
        return f"{value:.2f}"
    return f"{value:,.0f}"


def _machine() -> str:
    """CPU model, cores and memory of this machine, as the docs quote it."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")),
                 platform.processor() or platform.machine())
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{model}, {os.cpu_count()} cores, {memory:.0f} GiB"


def _hot_option(text: str) -> tuple[str, float]:
    column, _, share = text.partition("=")
    try:
        value = float(share)
    except ValueError:
        value = -1.0
    if not column or not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected COLUMN=SHARE with a share between 0 and 1, got {text!r}")
    return column, value


def main() -> None:
    from mlops.data.examples import EXAMPLES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="rows per example (--short: 3,000)")
    parser.add_argument("--examples", nargs="+", default=list(EXAMPLES), choices=list(EXAMPLES))
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--hot", metavar="COLUMN=SHARE", type=_hot_option,
                        help="give SHARE of the rows one value of COLUMN (merchant_id=0.3: one merchant holds 30 %%)")
    parser.add_argument("--short", action="store_true", help="a smoke run: few rows, rounds and epochs")
    parser.add_argument("--fit", choices=list(FAMILIES), help=argparse.SUPPRESS)  # the per-family child
    parser.add_argument("--example", help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fit:
        print(json.dumps(_fit(args.example, args.fit, args.folder, args.short)))
        return
    if args.hot:
        from mlops.contract import load_contract

        lacking = [e for e in args.examples
                   if args.hot[0] not in {c.name for c in load_contract(EXAMPLES[e][0]).columns}]
        if lacking:
            parser.error(f"--hot: {', '.join(lacking)} has no column {args.hot[0]!r}")
    short_rows = args.short and args.rows == parser.get_default("rows")
    work = Path(tempfile.mkdtemp(prefix="model-families-"))
    short_note = "; short: figures mean nothing, every family fits in this process" if args.short else ""
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {_machine()}; load average {os.getloadavg()[0]:.1f}{short_note}")
    failed = []
    for example in args.examples:
        rows = SHORT_ROWS[example] if short_rows else args.rows
        folder = work / example
        folder.mkdir()
        started = time.perf_counter()
        counts = _splits(example, rows, args.seed, folder, args.hot)
        hot_note = f"; {args.hot[1]:.0%} of the rows on one {args.hot[0]}" if args.hot else ""
        print(f"\n### {example}\n\n{rows:,} rows{hot_note}; train / validation / test {counts['train']:,} / "
              f"{counts['validation']:,} / {counts['test']:,} ({counts['test positives']:,} test positives); "
              f"features backfilled in {time.perf_counter() - started:.0f} s\n")
        print("| " + " | ".join(COLUMNS) + " |")
        print("|---|" + "---:|" * (len(COLUMNS) - 1))
        results = {}
        for label in args.families:
            outcome = _fit_here(example, label, folder) if args.short else _run_family(example, label, folder)
            if isinstance(outcome, str):
                failed.append(f"{label} on {example}")
                print(f"| {label} | failed: {outcome} |", flush=True)
                continue
            results[label] = outcome
            print("| " + " | ".join([label, *(_cell(c, outcome[c]) for c in COLUMNS[1:])]) + " |", flush=True)
        if {"mlp", "xgboost"} <= set(results):
            mlp, tree = results["mlp"], results["xgboost"]
            print(f"\nxgboost / mlp: train wall {tree['train wall s'] / mlp['train wall s']:.2f}x, test PR-AUC "
                  f"{tree['test PR-AUC'] - mlp['test PR-AUC']:+.4f}, 1-row calls/s "
                  f"{tree['1-row calls/s'] / mlp['1-row calls/s']:.2f}x")
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
