"""The drift job (`mlops drift run`) on a prediction log of N rows: wall time and peak memory.

    .venv/bin/python benchmarks/drift_job_scale.py --home .mlops --rows 100000 1000000 10000000

Needs `make demo` first. The demo's logged predictions (its replay of the test split through the
service) are repeated to N rows, each copy with its own event ids and its rows spread over the last
23 hours, and written as the log's own segments (one per 500,000 rows) into a copy of the home
without its log; `mlops drift run --since 1d` then runs in a fresh process under /usr/bin/time,
which reports its peak resident memory. Nothing of the original home is written.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mlops.prediction_log import SEGMENT_SUFFIX, window_tables
from mlops.settings import Settings
from mlops.store_location import relocate_store

SEGMENT_ROWS = 500_000


def logged(home: Path) -> pa.Table:
    tables = window_tables(home / "predictions", None, None)
    if not tables:
        sys.exit(f"no predictions logged in {home}: run `make demo` first")
    return pa.concat_tables(tables, promote_options="default")


def write_log(source: pa.Table, rows: int, folder: Path) -> None:
    """``rows`` rows of ``source`` repeated, ids made unique, logged_at spread over the last 23 hours."""
    end = datetime.now(UTC) - timedelta(minutes=5)
    start = end - timedelta(hours=23)
    spread = np.linspace(start.timestamp(), end.timestamp(), rows, endpoint=False)
    for first in range(0, rows, SEGMENT_ROWS):
        count = min(SEGMENT_ROWS, rows - first)
        chunk = source.take(pa.array(np.arange(first, first + count) % source.num_rows))
        ids = pc.binary_join_element_wise(chunk.column("event_id"), pa.array(np.arange(first, first + count)
                                                                           .astype(str)), "-")
        moments = pa.array((spread[first:first + count] * 1e6).astype("int64"), pa.timestamp("us", tz="UTC"))
        chunk = chunk.set_column(chunk.schema.get_field_index("event_id"), "event_id", ids)
        chunk = chunk.set_column(chunk.schema.get_field_index("logged_at"), "logged_at", moments)
        day = folder / datetime.fromtimestamp(float(spread[first]), UTC).strftime("%Y-%m-%d")
        day.mkdir(parents=True, exist_ok=True)
        with pa.ipc.new_stream(str(day / f"bench-{first:012d}{SEGMENT_SUFFIX}"), chunk.schema) as writer:
            writer.write_table(chunk, max_chunksize=65_536)


def drift_run(home: Path) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in GB, the job's last line) of one `mlops drift run --since 1d`."""
    started = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-f", "maxrss_kb %M", str(Path(sys.executable).parent / "mlops"),
                           "drift", "run", "--since", "1d"], env={**os.environ, "MLOPS_HOME": str(home),
                                                                  "MLOPS_DRIFT_RETRAIN": "false"},
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    peak = re.search(r"maxrss_kb (\d+)", done.stderr)
    if done.returncode not in (0, 1) or peak is None:  # 1: a WARNING/CRITICAL verdict
        sys.exit(f"drift run failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return seconds, int(peak.group(1)) / 1e6, lines[0] if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, default=Path(".mlops"))
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    args = parser.parse_args()
    source = logged(args.home)
    print(f"{source.num_rows:,} logged predictions of {args.home} repeated; `mlops drift run --since 1d`")
    print("| predictions in the window | wall time | peak memory | verdict |")
    print("|---|---|---|---|")
    for rows in args.rows:
        with tempfile.TemporaryDirectory(prefix="drift-scale-") as tmp:
            home = (Path(tmp) / "home").resolve()
            shutil.copytree(args.home, home, ignore=shutil.ignore_patterns("predictions", "monitoring", "kfp",
                                                                          "checkpoints", "logs", "*-shm"))
            relocate_store(Settings(home=home))  # the copy's store reads the copy's artifacts, as `mlops init` does
            write_log(source, rows, home / "predictions")
            seconds, peak, verdict = drift_run(home)
        print(f"| {rows:,} | {seconds:.0f} s | {peak:.2f} GB | {verdict[:100]} |", flush=True)


if __name__ == "__main__":
    main()
