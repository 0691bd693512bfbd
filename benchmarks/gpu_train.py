"""GPU training throughput: samples/s, utilisation and peak memory, fp32 vs bf16 autocast, one command.

    .venv/bin/python benchmarks/gpu_train.py            # about 2 minutes on one GPU; needs CUDA

The train step's input path (index slices of device tensors) and model, on synthetic rows shaped
like the contract's inputs, at a small and a large batch. Utilisation is sampled through NVML
(torch.cuda.utilization, needs pynvml) while the loop runs. Prints one table; no assertions.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

import torch
from train_input_path import Batch, synthetic, tensor_slices

from mlops.contract import load_contract
from mlops.contracts import BUNDLED_CONTRACT
from mlops.model import TabularMLP, fit_vocabularies


def _sample_utilisation(stop: threading.Event, readings: list[float]) -> None:
    while not stop.is_set():
        try:
            readings.append(float(torch.cuda.utilization()))
        except (ModuleNotFoundError, RuntimeError):
            return
        time.sleep(0.2)


def run(data: Batch, model: TabularMLP, batch_size: int, seconds: float, bf16: bool) -> tuple[float, float, float]:
    """(samples/s, mean utilisation %, peak memory MiB) over about ``seconds`` of training."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    torch.cuda.reset_peak_memory_stats()
    readings: list[float] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_utilisation, args=(stop, readings), daemon=True)
    seen, epoch = 0, 0
    started = time.perf_counter()
    sampler.start()
    while time.perf_counter() - started < seconds:
        for numeric, categorical, labels in tensor_slices(data, batch_size, epoch):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                logits = model.logits(numeric, categorical)
            loss_fn(logits.float(), labels).backward()
            optimizer.step()
            seen += len(labels)
        epoch += 1
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    stop.set()
    sampler.join()
    utilisation = sum(readings) / len(readings) if readings else float("nan")
    return seen / elapsed, utilisation, torch.cuda.max_memory_allocated() / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--seconds", type=float, default=20.0, help="per configuration (4 of them)")
    parser.add_argument("--hidden", default="256,128", help="layer widths (the default model is 64,32)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark needs a GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    contract = load_contract(BUNDLED_CONTRACT)
    vocabs = fit_vocabularies(contract)
    hidden = tuple(int(w) for w in args.hidden.split(","))
    cardinalities = [len(vocabs[n]) for n in contract.model_inputs.categorical]
    data = synthetic(args.rows, len(contract.numeric_inputs), cardinalities, device)
    print(f"{torch.cuda.get_device_name()} | {args.rows:,} rows on the GPU | hidden {hidden} | "
          f"bf16 supported: {torch.cuda.is_bf16_supported()}")
    print(f"{'batch':>7} {'precision':>9} {'samples/s':>13} {'GPU util %':>10} {'peak MiB':>9} {'bf16 speed-up':>13}")
    for batch_size in (512, 8192):
        fp32_rate = 0.0
        for bf16 in (False, True):
            torch.manual_seed(0)
            model = TabularMLP.for_contract(contract, vocabs, hidden=hidden).to(device)
            run(data, model, batch_size, 2.0, bf16)  # warm-up: kernels, allocator
            rate, utilisation, peak = run(data, model, batch_size, args.seconds, bf16)
            fp32_rate = fp32_rate or rate
            speedup = f"{rate / fp32_rate:.2f}x" if bf16 else ""
            print(f"{batch_size:>7} {'bf16' if bf16 else 'fp32':>9} {rate:>13,.0f} {utilisation:>10.0f} "
                  f"{peak:>9.0f} {speedup:>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
