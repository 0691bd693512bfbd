"""The `curl` to /predict that README.md, docs/first-hour.md and docs/pipeline.md show works as
printed against a service like the one `make serve` starts after `make demo`: port 8000 by default,
an entity the demo left in the online store (scored with its history: no unknown entity), and an
answer of the shape shown below it.

The home is the served platform's copy with the demo's own data published and the online store
materialized as the demo does (as of just before its test split), so the entities it knows are the
demo's; the command runs with curl on a free port (the only change to it).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from served_platform import ServedPlatform

from feature_repo.store import materialize_online, publish_features
from mlops.data.examples import example_generator
from pipelines.demo import free_port, replay_start, start_service, wait_ready
from pipelines.settings import PipelineSettings
from serving.settings import ServingSettings

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "docs/first-hour.md", "docs/pipeline.md")
CURL = re.compile(r"curl -s localhost:(\d+)/predict -H 'content-type: application/json' -d '([^']*)'")
ANSWER = re.compile(r"```json\n(\{.*?\})\n```", re.DOTALL)


def _example(page: str) -> tuple[str, int, dict[str, object], dict[str, object]]:
    """The page's curl command, its port, its request body and the answer shown after it."""
    text = (ROOT / page).read_text()
    curl = CURL.search(text)
    assert curl is not None, f"{page} shows no curl to /predict"
    answer = ANSWER.search(text, curl.end())
    assert answer is not None, f"{page} shows no answer after its curl"
    return curl.group(0), int(curl.group(1)), json.loads(curl.group(2)), json.loads(answer.group(1))


@pytest.fixture(scope="module")
def demo_data(platform_home: ServedPlatform) -> pd.DataFrame:
    """The demo's data, generated as `make demo` does (pipelines/demo.py run_demo), and its online
    store: the features published and materialized as of just before the test split."""
    settings, contract = platform_home.settings, platform_home.contract
    path = settings.resolved_home / "demo" / "demo.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    demo = PipelineSettings()  # the demo's size and seed
    example_generator(contract)(path, demo.demo_rows, contract, seed=demo.seed, scenario="none", fraud_rate=0.015)
    frame = pd.read_parquet(path)
    # A fresh feature registry and online store, as in the demo's new home (a materialization here
    # only merges what is newer than the copy's last one, which is later than the demo's).
    shutil.rmtree(settings.feast_dir)
    publish_features(frame, contract, settings)
    materialize_online(settings, contract, replay_start(frame, contract))
    return frame


@pytest.fixture(scope="module")
def service(platform_home: ServedPlatform, demo_data: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[int]:
    port = free_port(platform_home.settings.host)
    log_path = tmp_path_factory.mktemp("readme-service") / "serving.log"
    process = start_service(platform_home.settings, port, log_path)
    try:
        wait_ready(f"http://127.0.0.1:{port}", process, log_path)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_pages_show_one_example_on_the_default_port() -> None:
    examples = [_example(page) for page in PAGES]
    assert {port for _, port, _, _ in examples} == {ServingSettings.model_fields["port"].default} == {8000}
    assert len({json.dumps(body, sort_keys=True) for _, _, body, _ in examples}) == 1


def test_the_example_names_entities_the_demo_left_in_the_online_store(
        platform_home: ServedPlatform, demo_data: pd.DataFrame) -> None:
    contract = platform_home.contract
    _, _, body, _ = _example("README.md")
    materialized = demo_data[demo_data[contract.timestamp_column] < pd.Timestamp(replay_start(demo_data, contract))]
    for entity in contract.entities:
        assert body[entity.join_key] in set(materialized[entity.join_key]), entity.join_key
    for name in contract.model_inputs.categorical:
        assert body[name] in (contract.column(name).categories or ()), name


@pytest.mark.parametrize("page", PAGES)
def test_the_pages_curl_is_answered_200_with_a_known_entity(page: str, service: int,
                                                            platform_home: ServedPlatform) -> None:
    command, port, body, shown = _example(page)
    done = subprocess.run(["bash", "-c", command.replace(f"localhost:{port}/", f"localhost:{service}/")
                           .replace("curl -s ", "curl -s -w '\\n%{http_code}' ", 1)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    answer_text, status = done.stdout.rsplit("\n", 1)
    assert status == "200", done.stdout
    answer = json.loads(answer_text)
    assert answer["unknown_entities"] == []
    assert answer["unknown_categories"] == []
    assert answer["transaction_id"] == body["transaction_id"]
    assert set(answer) == set(shown)
    decisions = platform_home.contract.decisions
    assert answer["decision"] in {decisions.positive, decisions.negative}
