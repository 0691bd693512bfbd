"""Generate, ingest and validate at growing sizes: wall time and peak resident memory per step.

Each step runs in its own process (so its peak RSS is its own), on this checkout's code and, side
by side, on another checkout's (main's of today, from a temporary git worktree) where it fits:

    git worktree add /tmp/main-base ... main
    .venv/bin/python benchmarks/ingest_validate_scale.py --rows 100000 1000000 10000000 \\
        --base /tmp/main-base --base-max-rows 1000000

The other checkout's code is imported through PYTHONPATH, ahead of this venv's editable install.
Prints a Markdown table (docs/ingest-validation-scale.md holds one run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEPS = ("generate", "ingest", "validate")


def _step(step: str, rows: int, folder: Path) -> dict[str, object]:
    """One step in this process (the child side); returns what it produced."""
    from mlops.contract import load_contract
    from mlops.contracts import BUNDLED_CONTRACT
    from mlops.data import generator

    contract = load_contract(BUNDLED_CONTRACT)
    source = folder / "tx.parquet"
    if step == "generate":
        if hasattr(generator, "write_transactions"):
            generator.write_transactions(source, rows, seed=42)
        else:  # the code before chunked writing
            generator.generate_transactions(rows, seed=42).to_parquet(source, index=False)
        return {"code": generator.__file__}
    from mlops.data.ingest import ingest

    snapshot = ingest(str(source), folder / "snapshots", contract)
    if step == "ingest":
        return {"sha256": snapshot.sha256}
    from pipelines.steps.validate import check_snapshot

    report = check_snapshot(snapshot.path, contract, folder / "report")
    return {"success": report.success, "failed": report.failed}


def _measure(step: str, rows: int, folder: Path, code: Path | None) -> tuple[float, float, dict[str, object]]:
    """(wall seconds, peak RSS in MB, the step's output) of one step in a child process."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code / "platform"), str(code)])
    started = time.monotonic()
    child = subprocess.Popen([sys.executable, __file__, "--child", step, str(rows), str(folder)], env=env,
                             stdout=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - started
    output = child.stdout.read() if child.stdout else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{step} at {rows:,} rows failed (code {code or 'this checkout'})")
    return wall, usage.ru_maxrss / 1024, json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--base", type=Path, help="another checkout to run side by side (main's code)")
    parser.add_argument("--base-max-rows", type=int, default=1_000_000, help="largest size the base runs at")
    parser.add_argument("--child", nargs=3, metavar=("STEP", "ROWS", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        step, rows, folder = args.child
        print(json.dumps(_step(step, int(rows), Path(folder))))
        return
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    print("| rows | step | this code: wall s | peak RSS MB | base code: wall s | peak RSS MB |")
    print("|---|---|---|---|---|---|")
    for rows in args.rows:
        runs = {"new": None, **({"base": args.base} if args.base and rows <= args.base_max_rows else {})}
        results: dict[str, dict[str, tuple[float, float]]] = {}
        for name, code in runs.items():
            with tempfile.TemporaryDirectory(prefix="ingest-validate-scale-") as tmp:
                for step in STEPS:
                    wall, rss, out = _measure(step, rows, Path(tmp), code)
                    print(f"  {name} {step} at {rows:,} rows: {wall:.1f} s, {rss:,.0f} MB", file=sys.stderr, flush=True)
                    results.setdefault(step, {})[name] = (wall, rss)
                    if step == "validate" and not out["success"]:
                        print(f"  note: {name} validation failed at {rows:,} rows: {out['failed']}", flush=True)
        for step in STEPS:
            new_wall, new_rss = results[step]["new"]
            base = results[step].get("base")
            base_cells = f"{base[0]:.1f} | {base[1]:,.0f}" if base else "not run | not run"
            print(f"| {rows:,} | {step} | {new_wall:.1f} | {new_rss:,.0f} | {base_cells} |", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
