"""Scale of the pipeline on generated data: wall time and peak resident memory, side by side.

    .venv/bin/python benchmarks/pipeline_scale.py backfill 1000000 10000000
        the feature backfill alone per size, uniform data next to data whose hottest merchant holds
        30 % of the rows (merchant_id reassigned here; the generator is untouched)
    .venv/bin/python benchmarks/pipeline_scale.py pipeline 100000 1000000 [--base /tmp/main-base] [--runner kfp]
        `mlops pipeline run --runner inline` (or kfp: kfp.local, a process per step, the default
        runner) per size: per-step wall time and peak RSS; with --base, the same run on another
        checkout's code (e.g. `git worktree add /tmp/main-base main`) beside it

Each measurement runs in a fresh process; peak RSS is sampled from /proc (the process and its
children) every 50 ms. State lives under a temporary MLOPS_HOME that is removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
HOT_SHARE = 0.30


def _rss_kb(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants, in KB."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            continue
        stack.extend(int(c) for c in children)
    return total


def run_measured(command: list[str], env: dict[str, str]) -> tuple[float, dict[str, tuple[float, int]], int]:
    """Run ``command``; total wall, per-step (wall, peak RSS KB) from the runner's task lines, peak RSS KB."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               cwd=ROOT)
    peak = {"all": 0, "step": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            rss = _rss_kb(process.pid)
            peak["all"], peak["step"] = max(peak["all"], rss), max(peak["step"], rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    steps: dict[str, tuple[float, int]] = {}
    step_start, current = started, ""
    tail: list[str] = []
    assert process.stdout is not None
    for line in process.stdout:
        tail = [*tail[-30:], line]
        # kfp.local prefixes its lines with a time and a level and colours the names; the inline runner doesn't.
        line = re.sub(r"\x1b\[[0-9;]*m", "", line)
        if (started_step := re.search(r"Executing task '([^']+)'", line)) is not None:
            current, step_start, peak["step"] = started_step.group(1), time.perf_counter(), _rss_kb(process.pid)
        elif re.search(r"Task '[^']+' finished", line) and current:
            steps[current] = (time.perf_counter() - step_start, peak["step"])
    code = process.wait()
    process.stdout.close()
    done.set()
    sampler.join()
    if code != 0:
        sys.stderr.write("".join(tail))
        raise SystemExit(f"{' '.join(command)} exited {code}")
    return time.perf_counter() - started, steps, peak["all"]


def generate(rows: int, out: Path, env: dict[str, str]) -> None:
    subprocess.run([PYTHON, "-m", "mlops_cli", "data", "generate", "--rows", str(rows), "--out", str(out)],
                   env=env, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


_BACKFILL = """
import sys
from pathlib import Path
from mlops.backfill import backfill_features
from mlops.contract import load_contract
from mlops.settings import Settings
settings = Settings()
print(backfill_features(Path(sys.argv[1]), Path(sys.argv[2]), load_contract(settings.contract_path), settings))
"""

_HOT = """
import sys
import pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq, numpy as np
table = pq.read_table(sys.argv[1])
hot = np.random.default_rng(0).random(table.num_rows) < float(sys.argv[3])
merchant = pc.if_else(pa.array(hot), pa.scalar("M-HOT"), table["merchant_id"])
pq.write_table(table.set_column(table.schema.get_field_index("merchant_id"), "merchant_id", merchant), sys.argv[2])
"""


def backfill_mode(sizes: list[int], work: Path, env: dict[str, str]) -> None:
    print(f"| rows | data | backfill wall | peak RSS | (load average {os.getloadavg()[0]:.1f} at start) |")
    print("|---|---|---|---|---|")
    for rows in sizes:
        uniform, hot = work / f"uniform-{rows}.parquet", work / f"hot-{rows}.parquet"
        generate(rows, uniform, env)
        subprocess.run([PYTHON, "-c", _HOT, str(uniform), str(hot), str(HOT_SHARE)], check=True, env=env)
        measured = {}
        for name, data in (("uniform", uniform), ("hot merchant 30 %", hot)):
            wall, _, peak = run_measured([PYTHON, "-c", _BACKFILL, str(data), str(work / "features.parquet")], env)
            measured[name] = (wall, peak)
            print(f"| {rows:,} | {name} | {wall:.1f} s | {peak / 1e6:.2f} GB | |", flush=True)
        (u_wall, u_peak), (h_wall, h_peak) = measured.values()
        print(f"| {rows:,} | hot / uniform | {h_wall / u_wall:.2f}x | {h_peak / u_peak:.2f}x | |", flush=True)


def pipeline_mode(sizes: list[int], work: Path, env: dict[str, str], base: Path | None, runner: str) -> None:
    checkouts = {"this branch": None, **({f"base {base}": base} if base else {})}
    for rows in sizes:
        data = work / f"data-{rows}.parquet"
        generate(rows, data, env)
        for label, checkout in checkouts.items():
            run_env = dict(env, MLOPS_HOME=str(work / f"home-{rows}-{len(label)}"))
            if checkout is not None:  # the other checkout's code first on the path, this venv's libraries
                run_env["PYTHONPATH"] = f"{checkout / 'platform'}:{checkout}"
            wall, steps, peak = run_measured([PYTHON, "-m", "mlops_cli", "pipeline", "run", "--verbose", str(data),
                                              "--runner", runner], run_env)
            per_step = ", ".join(f"{name} {s:.0f} s / {kb / 1e6:.1f} GB" for name, (s, kb) in steps.items())
            print(f"| {rows:,} | {label} | {wall:.0f} s | {peak / 1e6:.2f} GB | {per_step} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["backfill", "pipeline"])
    parser.add_argument("rows", type=int, nargs="+")
    parser.add_argument("--base", type=Path, help="another checkout to run side by side (pipeline mode)")
    parser.add_argument("--runner", choices=["inline", "kfp"], default="inline",
                        help="the pipeline's runner (pipeline mode); peak RSS counts every step process")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pipeline-scale-") as tmp:
        env = dict(os.environ, MLOPS_HOME=str(Path(tmp) / "home"))
        if args.mode == "backfill":
            backfill_mode(args.rows, Path(tmp), env)
        else:
            print("| rows | code | wall | peak RSS | per step: wall / peak RSS |\n|---|---|---|---|---|")
            pipeline_mode(args.rows, Path(tmp), env, args.base, args.runner)


if __name__ == "__main__":
    main()
