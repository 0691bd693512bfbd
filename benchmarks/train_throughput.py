"""Training throughput: the platform's train step beside a bare PyTorch loop, same model, data and batch.

    .venv/bin/python benchmarks/train_throughput.py [--rows 210000] [--epochs 3] [--batch-sizes 512,4096]
        [--rounds 2] [--negative-sample-rate 1.0]

Writes contract-shaped train/validation/test Parquet files of ``--rows`` training rows (synthetic values,
labels that depend on them), then per batch size, alternating in each round so a neighbour's load
hits them alike, best of the rounds kept:

- train step, end to end: ``run_training`` as the pipeline calls it (columnar read of the split files,
  their hashes, the scaler, every epoch's validation, Platt calibration, threshold, ``model.pt``),
  rows x epochs / its wall time;
- train step, loop: the step's own per-epoch samples/s (what MLflow shows under ``system/``);
- bare loop: the 64-32 TabularMLP, Adam and BCE-with-logits over index slices of the same tensors,
  nothing else.

Prints one table with the ratios and the process's peak resident memory. No assertions.
"""

from __future__ import annotations

import argparse
import logging
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from mlops.contract import DataContract, load_contract
from mlops.contracts import BUNDLED_CONTRACT
from mlops.model import TabularMLP, fit_vocabularies
from mlops.settings import Settings
from pipelines.splits import split_paths
from pipelines.training.data import read_split
from pipelines.training.entry import run_training
from pipelines.training.trainer import TrainParams


def write_splits(folder: Path, contract: DataContract, train_rows: int, seed: int = 0) -> dict[str, Path]:
    """train/validation/test.parquet with every model input and the label (fraud depends on two inputs)."""
    rng = np.random.default_rng(seed)
    vocabs = fit_vocabularies(contract)
    sizes = {"train": train_rows, "validation": max(2_000, train_rows // 5), "test": max(2_000, train_rows // 5)}
    for name, rows in sizes.items():
        numeric = {col: rng.gamma(2.0, 20.0, rows).astype(np.float32) for col in contract.numeric_inputs}
        first, second = contract.numeric_inputs[0], contract.numeric_inputs[-1]
        score = (numeric[first] / 40.0 - 2.5) + (numeric[second] / 40.0 - 1.0) + rng.normal(0, 1, rows)
        columns: dict[str, pa.Array] = {col: pa.array(values) for col, values in numeric.items()}
        for col in contract.model_inputs.categorical:
            columns[col] = pa.array(rng.choice(vocabs[col], rows))
        columns[contract.label_column] = pa.array((score > 2.6).astype(np.int64))
        pq.write_table(pa.table(columns), folder / f"{name}.parquet")
    return split_paths(folder)


def bare_loop(data: tuple[torch.Tensor, torch.Tensor, torch.Tensor], model: TabularMLP, batch_size: int,
              epochs: int) -> float:
    numeric, categorical, labels = data
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    started = time.perf_counter()
    for epoch in range(epochs):
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(epoch))
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model.logits(numeric[idx], categorical[idx]), labels[idx]).backward()
            optimizer.step()
    return len(labels) * epochs / (time.perf_counter() - started)


def train_step(paths: dict[str, Path], work: Path, params: TrainParams, epochs: int) -> tuple[float, float]:
    """(end-to-end samples/s, mean in-loop samples/s) of one run of the pipeline's train step."""
    out = Path(tempfile.mkdtemp(dir=work))
    started = time.perf_counter()
    outcome = run_training(paths, out, str(out / "checkpoints"), params=params, settings=Settings(home=work))
    wall = time.perf_counter() - started
    result = outcome.result
    rows = result.rows_per_epoch * len(result.history)
    loop = float(np.mean([s.samples_per_s for s in result.system]))
    if len(result.history) != epochs:
        raise SystemExit(f"the train step stopped after {len(result.history)} of {epochs} epochs")
    return rows / wall, loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=210_000, help="training rows (the demo has 21,000)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-sizes", default="512,4096")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--negative-sample-rate", type=float, default=1.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    contract = load_contract(BUNDLED_CONTRACT)
    vocabs = fit_vocabularies(contract)
    with tempfile.TemporaryDirectory(prefix="train-throughput-") as tmp:
        work = Path(tmp)
        paths = write_splits(work, contract, args.rows)
        arrays = read_split(paths["train"], contract, vocabs, "train")
        tensors = (torch.from_numpy(arrays.numeric), torch.from_numpy(arrays.categorical),
                   torch.from_numpy(arrays.labels))
        rows: list[tuple[int, float, float, float]] = []
        for batch_size in (int(b) for b in args.batch_sizes.split(",")):
            params = TrainParams.from_settings(Settings(
                max_epochs=args.epochs, patience=args.epochs + 1, batch_size=batch_size, device="cpu",
                negative_sample_rate=args.negative_sample_rate))
            best_step = best_loop = best_bare = 0.0
            for _ in range(args.rounds):
                step, loop = train_step(paths, work, params, args.epochs)
                torch.manual_seed(0)
                bare = bare_loop(tensors, TabularMLP.for_contract(contract, vocabs), batch_size, args.epochs)
                best_step, best_loop, best_bare = max(best_step, step), max(best_loop, loop), max(best_bare, bare)
            rows.append((batch_size, best_step, best_loop, best_bare))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args.rows:,} training rows x {args.epochs} epochs, CPU, torch threads {torch.get_num_threads()}, "
          f"negative sample rate {args.negative_sample_rate}, best of {args.rounds} rounds, peak RSS {peak_mb:,.0f} MB")
    print(f"{'batch':>6} {'step end-to-end/s':>18} {'step loop/s':>12} {'bare loop/s':>12} "
          f"{'bare/step':>10} {'bare/loop':>10}")
    for batch_size, step, loop, bare in rows:
        print(f"{batch_size:>6} {step:>18,.0f} {loop:>12,.0f} {bare:>12,.0f} {bare / step:>9.2f}x {bare / loop:>9.2f}x")


if __name__ == "__main__":
    main()
