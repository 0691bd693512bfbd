"""`make demo`: generate data, run the pipeline, start the service, replay the test split through it,
print sample answers (caught frauds, a missed one, a false alarm) with the threshold and the whole
split's catch rate, stop the service, say what is next (with the ports really in use)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from datetime import datetime
from pathlib import Path

import httpx
import pandas as pd
from rich.console import Console
from rich.table import Table

from feature_repo.store import materialize_online
from mlops import registry
from mlops.contract import DataContract, load_contract
from mlops.data.examples import example_generator
from mlops.errors import MLOpsError
from mlops.settings import Settings
from mlops.triggers import ServeTrigger, start
from pipelines.demo_replay import pick_samples, replay, summary_line, with_outcomes
from pipelines.orchestration.environment import settings_env
from pipelines.orchestration.runner import new_run_name, run_log_path, run_pipeline
from pipelines.settings import PipelineSettings
from pipelines.steps.preprocess import time_split

STARTUP_TIMEOUT_S = 120.0
MLFLOW_UI_PORT = 5000  # mlflow ui's own default


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def demo_port(settings: Settings) -> int:
    """MLOPS_PORT when it is set; otherwise a free port (the default 8000 may be taken)."""
    return settings.port if "port" in settings.model_fields_set else free_port(settings.host)


def replay_start(frame: pd.DataFrame, contract: DataContract) -> datetime:
    """Just before the test split's first transaction: the online state a replay of it starts from."""
    first = pd.Timestamp(time_split(frame, contract)["test"][contract.timestamp_column].min())
    moment: datetime = (first - pd.Timedelta(microseconds=1)).to_pydatetime()
    return moment


def start_service(settings: Settings, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    """``mlops serve`` through the core's declared trigger: pipelines may not import serving."""
    env = {**os.environ, **settings_env(settings), "MLOPS_PORT": str(port)}
    with log_path.open("wb") as log_file:  # the child keeps its own descriptor
        return start(ServeTrigger(), log_file, env=env)


def wait_ready(base_url: str, process: subprocess.Popen[bytes], log_path: Path) -> dict[str, object]:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise MLOpsError(f"the service exited with {process.returncode}; see {log_path}")
        try:
            response = httpx.get(f"{base_url}/healthz", timeout=2)
            if response.status_code == 200:
                body: dict[str, object] = dict(response.json())
                return body
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise MLOpsError(f"the service did not become ready in {STARTUP_TIMEOUT_S:.0f} s; see {log_path}")


def run_demo(settings: PipelineSettings, rows: int, console: Console) -> None:
    contract = load_contract(settings.contract_path)
    demo_dir = settings.resolved_home / "demo"
    demo_dir.mkdir(parents=True, exist_ok=True)
    data_path = demo_dir / f"{contract.name}-{rows}-seed{settings.seed}.parquet"
    started = time.monotonic()
    generate = example_generator(contract)
    with console.status(f"[1/4] generating {rows:,} rows of {contract.name}"):
        share = generate(data_path, rows, contract, seed=settings.seed, scenario="none", fraud_rate=0.015)
        frame = pd.read_parquet(data_path)
    console.print(f"[1/4] {rows:,} rows of {contract.name} ({share:.2%} {contract.decisions.positive}) -> {data_path}")
    run_name = new_run_name(settings)
    # The demo serves what it just trained, so it promotes directly instead of starting a canary.
    settings = settings.model_copy(update={"rollout": "direct"})
    console.print(f"[2/4] running the training pipeline (kfp.local; step logs in {run_log_path(settings, run_name)})",
                  highlight=False)
    console.print(f"[2/4] direct promotion (demo); pipelines default to a {settings.canary_percent:g} % canary",
                  highlight=False)
    outcome = run_pipeline(str(data_path), settings, run_name=run_name,
                           on_step=lambda step: console.print(f"      {step.line}", highlight=False))
    verdict = {"promote": "promoted", "reject": "registered, not promoted"}.get(outcome.decision, outcome.decision)
    console.print(f"[2/4] pipeline done: version {outcome.version} {verdict}; "
                  f"production is version {outcome.production_version}")
    # The samples replay the test split, so the online store starts just before it; from there the
    # service records every transaction it scores (write-through).
    as_of = replay_start(frame, contract)
    with console.status("[3/4] materializing the online store"):
        written = materialize_online(settings, contract, as_of)
    console.print(f"[3/4] online store materialized as of {as_of.isoformat()} "
                  f"({', '.join(f'{n}: {c:,}' for n, c in written.items())})")
    port = demo_port(settings)
    base_url = f"http://{settings.host}:{port}"
    log_path = demo_dir / "serving.log"
    process = start_service(settings, port, log_path)
    try:
        with console.status(f"[4/4] starting the service on {base_url}"):
            health = wait_ready(base_url, process, log_path)
        console.print(f"[4/4] service ready at {base_url}, serving {health.get('model_name')} "
                      f"version {health.get('model_version')}")
        test = time_split(frame, contract)["test"]
        with console.status(f"[4/4] replaying the test split ({len(test):,} rows) through the service"), \
                httpx.Client(base_url=base_url, timeout=60) as http:
            answered = with_outcomes(replay(http, test, contract), contract)
        print_answers(console, answered, contract)
    finally:
        process.terminate()
        process.wait(timeout=30)
    console.print(f"service stopped. Demo took {time.monotonic() - started:.0f} s.")
    print_next_steps(console, settings)


def print_answers(console: Console, answered: pd.DataFrame, contract: DataContract) -> None:
    """The sample table (threshold in its title), then the whole split's catch rate and false alarms."""
    threshold = float(answered["threshold"].iloc[0])
    decisions = contract.decisions
    table = Table(contract.id_column, *contract.raw_inputs, "actual", "probability", "decision", "outcome",
                  "model version", title=f"sample answers from the test split: {decisions.positive} when "
                                         f"probability >= threshold {threshold:.3f}")
    for _, row in pick_samples(answered, contract).iterrows():
        raw = [f"{row[n]:.2f}" if isinstance(row[n], float) else str(row[n]) for n in contract.raw_inputs]
        table.add_row(str(row[contract.id_column]), *raw,
                      decisions.positive if row[contract.label_column] else decisions.negative,
                      f"{row['probability']:.4f}", str(row["decision"]), str(row["outcome"]), str(row["model_version"]))
    console.print(table)
    console.print(summary_line(answered, decisions), highlight=False)


def print_next_steps(console: Console, settings: Settings) -> None:
    """What to run next; the ports are the ones these commands will use with the current settings."""
    serving = f"http://{settings.host}:{settings.port}"
    # The experiment's runs list: one row per pipeline run, named after its outcome, metrics as columns.
    runs = f"http://127.0.0.1:{MLFLOW_UI_PORT}/{registry.runs_list_link(registry.ensure_experiment(settings))}"
    console.print("Next:")
    console.print(f"  MLflow UI:     .venv/bin/mlflow ui --port {MLFLOW_UI_PORT} --backend-store-uri "
                  f"{settings.resolved_tracking_uri}   (then open {runs})", highlight=False)
    console.print(f"  keep serving:  make serve   (then POST to {serving}/predict; MLOPS_PORT changes the port)",
                  highlight=False)
    console.print("  what it served: .venv/bin/mlops predictions show --since 1h", highlight=False)
    console.print("  registry:      .venv/bin/mlops model list", highlight=False)
