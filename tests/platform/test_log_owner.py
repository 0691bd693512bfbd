"""A home's prediction log belongs to one tracking store (platform/mlops/log_owner.py), on real files
and real processes: the first service claims it, another store's service or job is refused."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlops.errors import ConfigError
from mlops.log_owner import CLAIM_FILE, claim_log, log_owner, store_identity
from mlops.prediction_log import log_dir
from mlops.settings import Settings

SERVER = "http://serving:s3cret@127.0.0.1:5000"


def _settings(home: Path, tracking_uri: str | None = None) -> Settings:
    return Settings(home=home, tracking_uri=tracking_uri)


@pytest.mark.unit
def test_the_homes_own_store_is_one_store_however_the_home_is_reached(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    link = tmp_path / "link"
    link.symlink_to(home)
    direct = _settings(home)
    through_link = _settings(home, f"sqlite:///{link}/mlflow.db")

    claimed = claim_log(direct, log_dir(direct))

    assert claimed == store_identity(through_link) == "home:mlflow.db"
    assert log_dir(through_link) == home / "predictions"  # a reader through the link is the same store's
    assert claim_log(through_link, home / "predictions") == claimed
    copy = tmp_path / "copy"
    shutil.copytree(home, copy)  # a copied home (mlops init re-points its store) keeps a log it can read
    assert log_dir(_settings(copy)) == copy / "predictions"
    assert store_identity(_settings(home, SERVER)) == "http://127.0.0.1:5000"  # no credentials
    assert store_identity(_settings(home, f"sqlite:///{tmp_path}/other/mlflow.db")).startswith("sqlite:///")


@pytest.mark.unit
def test_another_store_on_a_claimed_home_is_refused_by_readers_and_writers(tmp_path: Path) -> None:
    home = tmp_path / "home"
    embedded = _settings(home)
    claim_log(embedded, home / "predictions")
    server = _settings(home, SERVER)

    with pytest.raises(ConfigError) as read:
        log_dir(server)
    with pytest.raises(ConfigError) as write:
        claim_log(server, home / "predictions")

    for refused in (read.value, write.value):
        message = str(refused)
        assert "the home's own store (mlflow.db)" in message
        assert "http://127.0.0.1:5000" in message
        assert "s3cret" not in message
        assert "\n" not in message
    assert log_owner(home / "predictions") == "home:mlflow.db"  # the claim is untouched
    assert sorted(p.name for p in (home / "predictions").iterdir()) == [CLAIM_FILE]  # nothing left beside it


@pytest.mark.unit
def test_an_unclaimed_log_is_read_by_any_store_and_claimed_by_the_first_service(tmp_path: Path) -> None:
    home = tmp_path / "home"
    server = _settings(home, SERVER)
    assert log_dir(server) == home / "predictions"  # an old log without a claim stays readable
    claim_log(server, home / "predictions")
    with pytest.raises(ConfigError):
        log_dir(_settings(home))


@pytest.mark.unit
@pytest.mark.parametrize("content", ["{not json", '{"store": ""}', "[1, 2]"])
def test_a_damaged_claim_fails_closed_naming_the_file(tmp_path: Path, content: str) -> None:
    directory = tmp_path / "home" / "predictions"
    directory.mkdir(parents=True)
    (directory / CLAIM_FILE).write_text(content)
    with pytest.raises(ConfigError, match=CLAIM_FILE):
        log_dir(_settings(tmp_path / "home"))


def _claim(home: str, tracking_uri: str | None, start: object, results: object) -> None:
    start.wait()  # type: ignore[attr-defined]
    settings = _settings(Path(home), tracking_uri)
    try:
        results.put((tracking_uri, claim_log(settings, Path(home) / "predictions")))  # type: ignore[attr-defined]
    except ConfigError:
        results.put((tracking_uri, None))  # type: ignore[attr-defined]


@pytest.mark.integration  # forks 8 processes
@pytest.mark.parametrize("round_", range(3))
def test_replicas_of_two_stores_starting_at_once_leave_exactly_one_owner(tmp_path: Path, round_: int) -> None:
    home = tmp_path / f"home-{round_}"
    context = multiprocessing.get_context("fork")
    start, results = context.Event(), context.Queue()
    stores = [None, SERVER] * 4
    workers = [context.Process(target=_claim, args=(str(home), uri, start, results)) for uri in stores]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join(30)
    outcomes = [results.get(timeout=5) for _ in workers]

    owner = log_owner(home / "predictions")
    winners = {uri for uri, claimed in outcomes if claimed is not None}
    assert len(winners) == 1  # one store's replicas all claim (or find their own claim), the other's are refused
    assert all(claimed in (None, owner) for _, claimed in outcomes)
    assert sum(claimed is None for _, claimed in outcomes) == 4
    assert json.loads((home / "predictions" / CLAIM_FILE).read_text()) == {"store": owner}


@pytest.mark.integration
def test_the_cli_refuses_another_stores_log_in_one_line_with_exit_code_2(tmp_path: Path) -> None:
    home = tmp_path / "home"
    claim_log(_settings(home), home / "predictions")
    env = {**os.environ, "MLOPS_HOME": str(home), "MLOPS_TRACKING_URI": SERVER}

    for command in (["predictions", "show"], ["serve"]):
        done = subprocess.run([sys.executable, "-m", "mlops_cli", *command], env=env, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "belongs to the home's own store (mlflow.db)" in done.stdout + done.stderr
        assert "Traceback" not in done.stdout + done.stderr
        assert "s3cret" not in done.stdout + done.stderr
