"""mlops.registry against a real MLflow SQLite store: the canary's edges, rollbacks beside a canary,
what the MLflow UI shows (the experiment's tags, the model's description, a version's tags) and
versions without a run or without their ONNX file."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

import pytest
from mlflow_models import logged_model

from mlops import registry
from mlops.errors import InputError, NotFoundError, RegistryError
from mlops.registry_client import activate
from mlops.registry_records import VersionDecision
from mlops.settings import Settings

pytestmark = pytest.mark.unit


def _two_versions(settings: Settings) -> tuple[str, str]:
    uri, run_id = logged_model(settings)
    return registry.register_version(settings, uri, run_id, {}), registry.register_version(settings, uri, run_id, {})


def test_a_canary_of_half_a_percent_runs_under_its_actor(settings: Settings) -> None:
    v1, v2 = _two_versions(settings)
    registry.promote(settings, v1, expected=None, actor="alice")
    assert registry.start_canary(settings, v2, 0.5, actor="bob", reason="") is None  # no canary ran before
    assert registry.canary(settings) == (v2, 0.5)
    [started] = registry.history(settings, registry.CANARY_ALIAS)
    assert (started.to_version, started.actor, started.reason) == (v2, "bob", "canary at 0.5 %")
    tags = registry.client(settings).get_registered_model(settings.model_name).tags
    assert tags[registry.CANARY_PERCENT_TAG] == "0.5"  # what the UI shows beside the alias


def test_a_canary_of_a_missing_or_malformed_version_is_refused(settings: Settings) -> None:
    _two_versions(settings)
    with pytest.raises(NotFoundError) as missing:
        registry.start_canary(settings, "9", 10, actor="bob", reason="")
    assert missing.value.message == f"model {settings.model_name} version 9 not found"
    with pytest.raises(RegistryError) as refused:
        registry.start_canary(settings, "latest", 10, actor="bob", reason="")
    assert refused.value.message.startswith("model registry failed starting the canary: Parameter 'version'")
    assert registry.canary(settings) is None


def test_a_version_without_a_run_is_listed_and_never_a_canary(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    registry.register_version(settings, uri, run_id, {})
    client = registry.client(settings)
    # Registered by hand from files outside any run.
    by_hand = (settings.artifact_root / "by-hand").as_uri()
    orphan = str(client.create_model_version(settings.model_name, by_hand).version)
    with pytest.raises(InputError) as refused:
        registry.start_canary(settings, orphan, 10, actor="bob", reason="")
    assert (refused.value.message, refused.value.field) == (
        f"version {orphan} has no run to record its canary share with", "version")
    newest = registry.list_versions(settings)[0]
    assert (newest["version"], newest["run_id"], "decision" in newest) == (orphan, "", False)
    # The alias set by hand (the UI): a canary with no recorded share serves no traffic.
    client.set_registered_model_alias(settings.model_name, registry.CANARY_ALIAS, orphan)
    assert registry.canary(settings) == (orphan, 0.0)


def test_rolling_back_another_alias_leaves_the_canary_running(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    v1, v2, v3, v4 = (registry.register_version(settings, uri, run_id, {}) for _ in range(4))
    registry.promote(settings, v1, expected=None, actor="alice")
    registry.promote(settings, v2, alias="challenger", expected=None, actor="bob")
    registry.promote(settings, v3, alias="challenger", expected=v2, actor="bob")
    registry.start_canary(settings, v4, 10, actor="bob", reason="")
    change = registry.rollback(settings, actor="carol", reason="shadow scores wrong", alias="challenger")
    assert (change.alias, change.from_version, change.to_version) == ("challenger", v3, v2)
    assert registry.canary(settings) == (v4, 10.0)


def test_each_rollback_during_a_canary_ends_the_running_one(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    v1, v2, v3 = (registry.register_version(settings, uri, run_id, {}) for _ in range(3))
    registry.promote(settings, v1, expected=None, actor="alice")
    registry.start_canary(settings, v2, 10, actor="bob", reason="")
    first = registry.rollback(settings, actor="carol", reason="errors")
    registry.start_canary(settings, v3, 20, actor="bob", reason="")
    second = registry.rollback(settings, actor="carol", reason="")
    assert (first.from_version, first.reason) == (v2, "errors")
    assert (second.alias, second.from_version, second.to_version, second.reason) == ("canary", v3, None, "rollback")
    assert registry.canary(settings) is None
    assert registry.alias_version(settings) == v1


def test_the_description_is_a_table_in_utc_whatever_the_local_zone(settings: Settings, berlin_clock: None) -> None:
    v1, v2 = _two_versions(settings)
    registry.promote(settings, v1, expected=None, actor="alice", reason="first")
    registry.start_canary(settings, v2, 10, actor="bob", reason="")
    registry.rollback(settings, actor="carol", reason="errors\nspiking")
    described = registry.client(settings).get_registered_model(settings.model_name).description.splitlines()
    assert described[:4] == [f"### Alias moves of {settings.model_name}", "",
                              "| when (UTC) | alias | from | to | who | why |", "|---|---|---|---|---|---|"]
    ended = registry.history(settings, registry.CANARY_ALIAS)[-1]
    when = f"{ended.at.astimezone(UTC):%Y-%m-%d %H:%M:%S}"
    assert described[4] == f"| {when} | canary | {v2} | removed | carol | errors spiking |"
    assert len(described) == 7  # the canary's end and start, then the first promotion


def test_an_experiment_made_before_the_runs_view_gets_it_and_a_new_one_has_the_training_layout(
        settings: Settings) -> None:
    client = registry.client(settings)
    old = client.create_experiment(settings.experiment, artifact_location=settings.artifact_root.as_uri())
    assert registry.ensure_experiment(settings) == old
    assert client.get_experiment(old).tags[registry.RUNS_VIEW_TAG] == registry.RUNS_VIEW
    client.delete_experiment(old)
    renamed = settings.model_copy(update={"experiment": "fresh"})
    tags = client.get_experiment(registry.ensure_experiment(renamed)).tags
    assert (tags[registry.EXPERIMENT_KIND_TAG], tags[registry.RUNS_VIEW_TAG]) == (registry.EXPERIMENT_KIND,
                                                                                 registry.RUNS_VIEW)


def test_a_file_store_keeps_the_artifacts_under_home_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 opens a file store only when asked to
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "mlruns").mkdir()
    settings = Settings(home=tmp_path / "home", tracking_uri=f"file://{tmp_path}/mlruns")
    experiment_id = registry.ensure_experiment(settings)
    location = registry.client(settings).get_experiment(experiment_id).artifact_location
    assert location == settings.artifact_root.as_uri()


def test_a_version_carries_its_run_and_the_given_tags_for_the_ui(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    decided = VersionDecision(decision="keep", reason="test", candidate_f1=0.5, candidate_pr_auc=0.625)
    version = registry.register_version(settings, uri, run_id, {"decision": "keep"}, decided)
    tags = registry.client(settings).get_model_version(settings.model_name, version).tags
    assert tags == {"decision": "keep", "run_id": run_id}
    [row] = registry.list_versions(settings)
    assert (row["candidate_f1"], row["candidate_pr_auc"]) == ("0.5000", "0.6250")


def test_a_version_without_its_onnx_file_is_not_found(settings: Settings, tmp_path: Path) -> None:
    import mlflow

    uri, run_id = logged_model(settings)
    registry.register_version(settings, uri, run_id, {})
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "README.md").write_text("not a model\n")
    activate(settings)
    with mlflow.start_run(run_id=run_id):
        mlflow.log_artifacts(str(notes), artifact_path="notes")
    client = registry.client(settings)
    source = f"{client.get_run(run_id).info.artifact_uri}/notes"
    version = str(client.create_model_version(settings.model_name, source, run_id=run_id).version)
    with pytest.raises(NotFoundError) as missing:
        registry.download_version(settings, version, tmp_path / "dl")
    assert missing.value.message == f"model {settings.model_name} version {version} has no model.onnx"
