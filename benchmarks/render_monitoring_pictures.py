"""Draws docs/dashboards/drift.png, quality.png and canary.png from a real run: a real Prometheus
(Debian's binary, tests/prometheus_stack.py) scrapes the prediction service and a Pushgateway while
traffic that follows the demo's data is replayed through the service, a retrained candidate serves a
canary, late labels arrive, and the drift job, the quality job and the canary judge run as the
`mlops` commands, pushing their metrics; `python -m monitoring.render_dashboards` then draws every
dashboard from Prometheus' answers.

The run: `make demo` into a temporary MLOPS_HOME (or --home, a demo home of one version); one
generator stream of the demo's population (seed 42, 500 transactions a day): its first --train-rows
rows train a candidate through `mlops pipeline run --runner inline` (the pipeline's canary rollout at
--canary-percent; when evaluate rejects it, `mlops model promote V --canary P` starts the canary
instead, and the output says so), the next --traffic-rows rows are replayed through the service at
their own event times over --minutes minutes; --cycle-s seconds after each round of jobs the labels
of the requests answered --label-delay-s seconds before arrive (`mlops labels ingest`), then `mlops drift run`,
`mlops labels quality` and `mlops model canary judge` run.

    .venv/bin/python benchmarks/render_monitoring_pictures.py [--home DIR] [--out docs/dashboards]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from prometheus_stack import prometheus_stack

from feature_repo.store import materialize_online
from mlops import registry
from mlops.contract import DataContract, load_contract
from mlops.data.generator import DEFAULT_START, generate_transactions
from mlops.triggers import command_path
from pipelines.demo import free_port, start_service, wait_ready
from pipelines.demo_replay import request_body
from pipelines.settings import PipelineSettings

ROOT = Path(__file__).resolve().parents[1]
DEMO_ROWS, DEMO_DAYS = 30_000, 60  # what `make demo` generates: its population, 500 transactions a day
PICTURES = ("drift", "quality", "canary")


def mlops(*args: str) -> subprocess.CompletedProcess[str]:
    """One `mlops` command as its own process, as a schedule runs it; its output echoed."""
    done = subprocess.run([str(command_path()), *args], capture_output=True, text=True, check=False,
                          cwd=ROOT)
    lines = (done.stdout + done.stderr).strip().splitlines()
    print(f"$ mlops {' '.join(args)} -> exit {done.returncode}", *(f"    {line}" for line in lines[-8:]),
          sep="\n", flush=True)
    return done


def build_home(work: Path) -> Path:
    home = work / "home"
    print(f"make demo into {home} ...", flush=True)
    subprocess.run(["make", "demo"], cwd=ROOT, env={**os.environ, "MLOPS_HOME": str(home)}, check=True,
                   stdout=subprocess.DEVNULL)
    return home


def start_canary(settings: PipelineSettings, candidate_data: Path, percent: float) -> str:
    """The pipeline's canary rollout of a candidate trained on ``candidate_data``; a manual canary of
    its version when evaluate rejected it. The canary's version."""
    mlops("pipeline", "run", str(candidate_data), "--runner", "inline", "--run-name", "candidate")
    running = registry.canary(settings)
    if running is not None:
        print(f"the pipeline's deploy started canary version {running[0]} at {running[1]:g} %")
        return running[0]
    version = max((row["version"] for row in registry.list_versions(settings)), key=int)
    print(f"evaluate did not accept version {version}: starting its canary by hand")
    mlops("model", "promote", version, "--canary", f"{percent:g}", "--reason", "dashboard pictures' canary")
    return version


class Labels:
    """Late labels: each answered request's label, delivered once ``delay_s`` has passed."""

    def __init__(self, contract: DataContract, work: Path, delay_s: float) -> None:
        self.contract, self.work, self.delay_s = contract, work, delay_s
        self.answered: list[tuple[float, str, int]] = []
        self.delivered = 0
        self.lock = threading.Lock()

    def answer(self, transaction_id: str, label: int) -> None:
        with self.lock:
            self.answered.append((time.monotonic(), transaction_id, label))

    def deliver(self, *, everything: bool = False) -> None:
        with self.lock:
            due = [a for a in self.answered[self.delivered:] if everything or a[0] <= time.monotonic() - self.delay_s]
            self.delivered += len(due)
        if not due:
            return
        path = self.work / f"labels-{self.delivered}.parquet"
        pd.DataFrame({self.contract.id_column: [d[1] for d in due],
                      self.contract.label_column: [d[2] for d in due]}).to_parquet(path, index=False)
        mlops("labels", "ingest", str(path))


def run_jobs(labels: Labels, *, everything: bool = False) -> None:
    labels.deliver(everything=everything)
    mlops("drift", "run", "--since", "30m")
    mlops("labels", "quality", "--window", "1D", "--since", "30m")
    mlops("model", "canary", "judge", "--if-running")


def replay(base: str, traffic: pd.DataFrame, contract: DataContract, labels: Labels, seconds: float) -> int:
    """Each row through /predict, paced evenly over ``seconds``; the count of failed requests."""
    failed, started = 0, time.monotonic()
    with httpx.Client(base_url=base, timeout=30) as http:
        for i, (_, row) in enumerate(traffic.iterrows()):
            pause = started + seconds * i / len(traffic) - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            answer = http.post("/predict", json=request_body(row, contract))
            if answer.status_code == 200:
                labels.answer(str(row[contract.id_column]), int(row[contract.label_column]))
            else:
                failed += 1
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, help="a `make demo` home of one version (default: make demo anew)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboards")
    parser.add_argument("--train-rows", type=int, default=60_000)
    parser.add_argument("--traffic-rows", type=int, default=8_000)
    parser.add_argument("--minutes", type=float, default=6.0)
    parser.add_argument("--canary-percent", type=float, default=25.0)
    parser.add_argument("--cycle-s", type=float, default=45.0)
    parser.add_argument("--label-delay-s", type=float, default=60.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="monitoring-pictures-"))
    home = args.home or build_home(work)
    os.environ.update({"MLOPS_HOME": str(home), "MLOPS_MODEL_POLL_INTERVAL_S": "2", "MLOPS_DRIFT_RETRAIN": "false",
                       "MLOPS_CANARY_PERCENT": f"{args.canary_percent:g}"})
    settings = PipelineSettings()
    contract = load_contract(settings.contract_path)
    rows = args.train_rows + args.traffic_rows
    stream = generate_transactions(rows, seed=settings.seed, days=round(rows * DEMO_DAYS / DEMO_ROWS),
                                   start=DEFAULT_START, population_rows=DEMO_ROWS, contract=contract)
    candidate_data, traffic = work / "candidate.parquet", stream.iloc[args.train_rows:].reset_index(drop=True)
    stream.iloc[:args.train_rows].to_parquet(candidate_data, index=False)
    canary_version = start_canary(settings, candidate_data, args.canary_percent)
    first = pd.Timestamp(traffic[contract.timestamp_column].min()).to_pydatetime()
    materialize_online(settings, contract, first - timedelta(microseconds=1))

    port = free_port(settings.host)
    base = f"http://{settings.host}:{port}"
    service = start_service(settings.model_copy(update={"port": port}), port, work / "serving.log")
    try:
        wait_ready(base, service, work / "serving.log")
        (work / "prometheus").mkdir()
        with prometheus_stack(work / "prometheus", {"prediction-service": f"{settings.host}:{port}"}) as stack:
            os.environ["MLOPS_PUSHGATEWAY_URL"] = stack.gateway
            began, labels = time.time(), Labels(contract, work, args.label_delay_s)
            stop = threading.Event()

            def schedule() -> None:
                while not stop.wait(args.cycle_s):
                    run_jobs(labels)

            jobs = threading.Thread(target=schedule, daemon=True)
            jobs.start()
            failed = replay(base, traffic, contract, labels, args.minutes * 60)
            stop.set()
            jobs.join()
            run_jobs(labels, everything=True)
            time.sleep(5)  # two scrapes of the last pushes
            minutes = (time.time() - began) / 60 + 0.5
            subprocess.run([sys.executable, "-m", "monitoring.render_dashboards", "--prometheus", stack.prometheus,
                            "--out", str(work / "png"), "--minutes", f"{minutes:.1f}"], cwd=ROOT, check=True)
            served = {r["metric"].get("version", "?"): r["value"][1] for r in stack.query("mlops_model_info")}
    finally:
        service.terminate()
        service.wait(timeout=30)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in PICTURES:
        shutil.copy(work / "png" / f"{name}.png", args.out / f"{name}.png")
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC: {len(traffic):,} requests over {minutes:.1f} min "
          f"({failed} failed), events {first:%Y-%m-%d} to {traffic[contract.timestamp_column].max():%Y-%m-%d}, "
          f"{int(traffic[contract.label_column].sum())} frauds; canary version {canary_version} at "
          f"{args.canary_percent:g} %; served at the end: {served}; pictures in {args.out}; work in {work}")
    mlops("model", "list")
    mlops("model", "history")


if __name__ == "__main__":
    main()
