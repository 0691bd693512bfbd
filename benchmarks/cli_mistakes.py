"""How fast the ``mlops`` CLI rejects common argument mistakes: each runs as a user runs it (the
installed ``mlops`` script, a fresh process, an empty MLOPS_HOME), several times; the table gives
the exit code, the median and slowest wall time, and the first line it printed.

The goal is exit code 2 within 2 s for every one: a command checks its arguments and files before
it loads settings or imports pandas, MLflow, kfp or torch.

    .venv/bin/python benchmarks/cli_mistakes.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MISTAKES: list[list[str]] = [
    ["train"],
    ["train", "--data-dir", "/nonexistent/splits"],
    ["model", "promote", "latest"],
    ["drift", "run", "--since", "yesterday"],
    ["pipeline", "run", "data/tx.parquet", "--runner", "argo"],
    ["pipeline", "run", "/nonexistent/tx.parquet"],
    ["data", "generate", "--out", "tx.txt"],
    ["predictions", "show", "--format", "xml"],
    ["labels", "quality", "--since", "1week"],
    ["features", "materialize", "--end", "tomorrow"],
    ["serve", "--workers", "0"],
    ["data", "generate", "--out", "tx.csv", "--rows", "ten"],
]
LIMIT_S = 2.0


def run_once(mlops: Path, args: list[str], env: dict[str, str], cwd: str) -> tuple[int, float, str]:
    started = time.perf_counter()
    done = subprocess.run([str(mlops), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120,
                          check=False)
    elapsed = time.perf_counter() - started
    said = next((line.strip(" │╭╰─") for line in (done.stderr + done.stdout).splitlines()
                 if line.strip(" │╭╰─")), "")
    return done.returncode, elapsed, said


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    mlops = Path(sys.executable).parent / "mlops"
    failed = 0
    with tempfile.TemporaryDirectory(prefix="cli-mistakes-") as home:
        env = {**os.environ, "MLOPS_HOME": home}
        run_once(mlops, ["--version"], env, home)  # the first start pays for cold file caches
        print(f"{'command':<58} {'exit':>4} {'median s':>9} {'max s':>7}  first line")
        for mistake in MISTAKES:
            runs = [run_once(mlops, mistake, env, home) for _ in range(args.repeats)]
            codes = {code for code, _, _ in runs}
            times = [elapsed for _, elapsed, _ in runs]
            ok = codes == {2} and max(times) <= LIMIT_S
            failed += not ok
            print(f"{'mlops ' + ' '.join(mistake):<58} {'/'.join(map(str, sorted(codes))):>4} "
                  f"{statistics.median(times):>9.2f} {max(times):>7.2f}  {runs[0][2][:70]}{'' if ok else '  <- FAIL'}")
        # The floor on this machine now: the interpreter with typer and pydantic (typer 0.29 coerces
        # every parameter through pydantic), which every answer pays before any check of ours.
        floor = [run_once(Path(sys.executable), ["-c", "import typer._adapters, rich.console"], env, home)[1]
                 for _ in range(args.repeats)]
        print(f"{'floor: python importing typer._adapters, rich.console':<58} {'':>4} "
              f"{statistics.median(floor):>9.2f} {max(floor):>7.2f}")
    with open("/proc/loadavg") as load:
        print(f"{len(MISTAKES) - failed} of {len(MISTAKES)} answered with exit code 2 within {LIMIT_S:.0f} s "
              f"(load average {load.read().split()[0]} on {os.cpu_count()} cores)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
