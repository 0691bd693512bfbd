"""mlops.registry against a real MLflow SQLite store: experiment location, register, promote."""

from __future__ import annotations

import os
import warnings
from datetime import timedelta
from pathlib import Path

import onnx
import pytest
from mlflow_models import logged_model
from mlflow_tags import delete_every_tag

from mlops import registry
from mlops.errors import InputError, ModelNotReadyError, NotFoundError, PromotionConflictError, RegistryError
from mlops.registry_records import VersionDecision, revise_decision
from mlops.settings import Settings

pytestmark = pytest.mark.unit


def _decided(decision: str) -> VersionDecision:
    return VersionDecision(decision=decision, reason="test", candidate_f1=0.5, candidate_pr_auc=0.6)


def test_experiment_artifacts_live_under_home(settings: Settings) -> None:
    experiment_id = registry.ensure_experiment(settings)
    assert registry.ensure_experiment(settings) == experiment_id
    location = registry.client(settings).get_experiment(experiment_id).artifact_location
    assert location == settings.artifact_root.as_uri()


def test_a_client_creates_home_and_passes_the_retry_setting_on(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    # Set, then deleted: both recorded, so the value the client writes is removed after the test.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "120")
    registry.client(Settings(home=tmp_path / "new" / "home"))
    assert (tmp_path / "new" / "home").is_dir()
    # By default an outage is reported in seconds, not after MLflow's minutes of retries.
    assert (os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"], os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"]) == ("2", "5")
    # The same, now migrated, store: a second client with other settings needs no second migration (4 s).
    registry.client(Settings(home=tmp_path / "new" / "home", tracking_http_retries=3, tracking_http_timeout_s=2.5))
    assert (os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"], os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"]) == ("3", "2.5")


def test_no_alias_means_not_ready(settings: Settings, tmp_path: Path) -> None:
    registry.ensure_experiment(settings)
    assert registry.alias_version(settings) is None
    with pytest.raises(ModelNotReadyError, match=r"holds alias 'production' yet; run the pipeline first "
                                                 r"\(mlops pipeline run\)$"):
        registry.download_serving_model(settings, tmp_path / "dl")


def test_promote_moves_alias_and_stage_and_archives_previous(settings: Settings, tmp_path: Path) -> None:
    first_uri, first_run = logged_model(settings)
    second_uri, second_run = logged_model(settings)
    v1 = registry.register_version(settings, first_uri, first_run, {}, _decided("promote"))
    v2 = registry.register_version(settings, second_uri, second_run, {}, _decided("promote"))
    assert (v1, v2) == ("1", "2")
    assert registry.promote(settings, v1) is None
    assert registry.promote(settings, v2) == v1
    assert registry.alias_version(settings) == v2
    client = registry.client(settings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        stages = {v: client.get_model_version(settings.model_name, v).current_stage for v in (v1, v2)}
    assert stages == {v1: "Archived", v2: "Production"}
    served = registry.download_serving_model(settings, tmp_path / "dl")
    assert (served.name, served.version, served.run_id) == (settings.model_name, v2, second_run)
    assert served.onnx_path.is_relative_to(tmp_path / "dl")  # where the caller asked, not a temp folder
    registry.promote(settings, v1, alias="challenger", actor="test")
    assert registry.download_serving_model(settings, tmp_path / "challenger", alias="challenger").version == v1
    # Moves without an actor or reason are still recorded, as by "unknown" with no reason.
    assert [(c.actor, c.reason) for c in registry.history(settings, "production")] == [("unknown", "")] * 2
    assert onnx.load(str(served.onnx_path)).graph.node[0].op_type == "Identity"
    rows = registry.list_versions(settings)
    assert [r["version"] for r in rows] == [v2, v1]
    assert rows[0]["aliases"] == "production"
    assert (rows[1]["decision"], rows[1]["run_id"]) == ("promote", first_run)


def test_missing_version_is_not_found(settings: Settings, tmp_path: Path) -> None:
    uri, run_id = logged_model(settings)
    registry.register_version(settings, uri, run_id, {})
    with pytest.raises(NotFoundError, match="version 7 not found"):
        registry.download_version(settings, "7", tmp_path / "dl")


def test_every_move_is_audited_and_rollback_returns_to_the_previous_version(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    v1, v2 = (registry.register_version(settings, uri, run_id, {}) for _ in range(2))
    registry.promote(settings, v1, expected=None, actor="alice", reason="first model")
    registry.promote(settings, v2, expected=v1, actor="bob", reason="better F1")

    change = registry.rollback(settings, actor="carol", reason="alert fired")

    assert registry.alias_version(settings) == v1
    assert (change.from_version, change.to_version, change.actor, change.reason) == (v2, v1, "carol", "alert fired")
    assert [(c.from_version, c.to_version, c.actor) for c in registry.history(settings)] == [
        (None, v1, "alice"), (v1, v2, "bob"), (v2, v1, "carol")]


def test_rollback_follows_the_serving_alias_only(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    v1, v2, v3 = (registry.register_version(settings, uri, run_id, {}) for _ in range(3))
    registry.promote(settings, v1, expected=None, actor="alice")
    registry.promote(settings, v2, expected=v1, actor="bob")
    registry.promote(settings, v3, alias="challenger", expected=None, actor="carol")  # the latest move overall

    change = registry.rollback(settings, actor="dave", reason="")

    assert registry.aliases(settings) == {"production": v1, "challenger": v3}
    assert (change.alias, change.from_version, change.to_version, change.reason) == ("production", v2, v1, "rollback")
    assert change.at.utcoffset() == timedelta(0)


def test_rollback_of_another_alias_moves_that_alias_only(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    v1, v2, v3 = (registry.register_version(settings, uri, run_id, {}) for _ in range(3))
    registry.promote(settings, v1, expected=None, actor="alice")
    registry.promote(settings, v2, alias="challenger", expected=None, actor="bob")
    registry.promote(settings, v3, alias="challenger", expected=v2, actor="bob")

    change = registry.rollback(settings, actor="carol", reason="shadow scores wrong", alias="challenger")

    assert registry.aliases(settings) == {"production": v1, "challenger": v2}
    assert (change.alias, change.from_version, change.to_version) == ("challenger", v3, v2)


def test_the_model_description_shows_every_move_newest_first(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    v1, v2 = (registry.register_version(settings, uri, run_id, {}) for _ in range(2))
    registry.promote(settings, v1, expected=None, actor="alice", reason="first model")
    registry.promote(settings, v2, expected=v1, actor="bob", reason="better F1 | margin 0.02")

    described = registry.client(settings).get_registered_model(settings.model_name).description
    rows = [line for line in described.splitlines() if line.startswith("| 20")]
    moves = [[cell.strip() for cell in row.split(" | ")[1:]] for row in rows]
    assert moves == [["production", v1, v2, "bob", "better F1 \\| margin 0.02 |"],
                     ["production", "none", v1, "alice", "first model |"]]


def test_rollback_refuses_when_the_alias_moved_outside_the_audit(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    v1, v2, v3 = (registry.register_version(settings, uri, run_id, {}) for _ in range(3))
    registry.promote(settings, v1, expected=None, actor="alice")
    registry.promote(settings, v2, expected=v1, actor="bob")
    registry.client(settings).set_registered_model_alias(settings.model_name, "production", v3)  # by hand, e.g. the UI

    with pytest.raises(PromotionConflictError, match="expected 2, now 3; nothing changed"):
        registry.rollback(settings, actor="carol", reason="alert fired")
    assert registry.alias_version(settings) == v3


def test_store_refusals_are_registry_errors_and_a_missing_version_is_not_found(
        settings: Settings, tmp_path: Path) -> None:
    uri, run_id = logged_model(settings)
    registry.register_version(settings, uri, run_id, {})
    with pytest.raises(NotFoundError) as missing:
        registry.promote(settings, "9", actor="test")
    assert missing.value.message == f"model {settings.model_name} version 9 not found"
    with pytest.raises(RegistryError) as refused:
        registry.promote(settings, "latest", actor="test")
    assert refused.value.message.startswith("model registry failed moving alias 'production': Parameter 'version'")
    with pytest.raises(RegistryError) as refused:
        registry.download_version(settings, "latest", tmp_path / "dl")
    assert refused.value.message.startswith("model registry failed reading version latest: Parameter 'version'")
    with pytest.raises(RegistryError) as refused:  # a store that refuses the request is not "no model"
        registry.aliases(settings.model_copy(update={"model_name": "team/fraud"}))
    assert refused.value.message.startswith("model registry failed reading 'team/fraud': Invalid model name")


def test_rollback_without_an_earlier_version_is_refused(settings: Settings) -> None:
    refused = "alias 'production' has no earlier version to roll back to"
    with pytest.raises(PromotionConflictError, match=refused):  # nothing registered yet
        registry.rollback(settings, actor="test", reason="")
    uri, run_id = logged_model(settings)
    registry.promote(settings, registry.register_version(settings, uri, run_id, {}), expected=None, actor="test")
    with pytest.raises(PromotionConflictError, match=refused):  # the first model replaced none
        registry.rollback(settings, actor="test", reason="")


def test_versions_are_listed_without_aliases_and_apart_from_other_models(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    # The tag says otherwise: the listing shows the recorded decision, tags are for the UI.
    version = registry.register_version(settings, uri, run_id, {"decision": "tagged"}, _decided("keep"))
    other = settings.model_copy(update={"model_name": "another-model"})
    registry.register_version(other, uri, run_id, {}, _decided("reject"))  # its version 1, from the same run

    def listed() -> list[tuple[str, str, str, str]]:
        return [(r["version"], r["aliases"], r["stage"], r["decision"]) for r in registry.list_versions(settings)]

    assert listed() == [(version, "", "None", "keep")]
    registry.promote(settings, version, actor="test")
    registry.promote(settings, version, alias="challenger", actor="test")
    assert listed() == [(version, "challenger,production", "Production", "keep")]
    assert [r["decision"] for r in registry.list_versions(other)] == ["reject"]
    unrecorded = registry.register_version(settings, uri, run_id, {"decision": "promote"})
    assert "decision" not in registry.list_versions(settings)[0]
    assert registry.list_versions(settings)[0]["version"] == unrecorded


def test_a_stale_expectation_moves_nothing(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    v1, v2 = (registry.register_version(settings, uri, run_id, {}) for _ in range(2))
    registry.promote(settings, v1, expected=None, actor="test")

    with pytest.raises(PromotionConflictError) as raised:
        registry.promote(settings, v2, expected=None, actor="evaluate saw no production model")
    assert raised.value.message == "alias 'production' moved since it was read: expected none, now 1; nothing changed"
    with pytest.raises(PromotionConflictError, match="expected 2, now none; nothing changed"):
        registry.promote(settings, v1, alias="challenger", expected=v2, actor="test")

    assert registry.alias_version(settings) == v1
    assert len(registry.history(settings)) == 1


def test_an_unreachable_registry_is_an_error_never_no_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A dead link where the SQLite file's folder should be: MLflow can neither open nor create it.
    dead = tmp_path / "dead-link"
    dead.symlink_to(tmp_path / "nowhere")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    outage = Settings(home=tmp_path / "home", tracking_uri=f"sqlite:///{dead}/mlflow.db")

    # Named explicitly, a store that is not there is never created: an outage, naming the store.
    with pytest.raises(RegistryError, match=rf"^no tracking store at {dead}/mlflow.db: restore it"):
        registry.alias_version(outage)
    with pytest.raises(RegistryError):
        registry.promote(outage, "1", expected=None, actor="pipeline")
    with pytest.raises(RegistryError):
        registry.list_versions(outage)


def _stage(settings: Settings, version: str) -> str:
    return str(registry.client(settings).get_model_version(settings.model_name, version).current_stage)


def test_a_canary_is_staged_shared_then_promoted_and_the_previous_version_archived(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    v1, v2 = (registry.register_version(settings, uri, run_id, {}) for _ in range(2))
    registry.promote(settings, v1, expected=None, actor="alice")

    registry.start_canary(settings, v2, 12.5, actor="bob", reason="try it")
    running, staged = registry.canary(settings), _stage(settings, v2)
    registry.promote(settings, v2, expected=v1, actor="bob", reason="canary held up")

    assert running == (v2, 12.5)
    assert staged == "Staging"
    assert registry.canary(settings) is None
    assert registry.aliases(settings) == {"production": v2}
    assert (_stage(settings, v1), _stage(settings, v2)) == ("Archived", "Production")
    canary_moves = [(c.from_version, c.to_version) for c in registry.history(settings, registry.CANARY_ALIAS)]
    assert canary_moves == [(None, v2), (v2, None)]


def test_rollback_during_a_canary_ends_it_and_leaves_production(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    v1, v2 = (registry.register_version(settings, uri, run_id, {}) for _ in range(2))
    registry.promote(settings, v1, expected=None, actor="alice")
    registry.start_canary(settings, v2, 10, actor="bob", reason="")

    change = registry.rollback(settings, actor="carol", reason="canary errors")

    assert (change.alias, change.from_version, change.to_version) == ("canary", v2, None)
    assert registry.canary(settings) is None
    assert registry.alias_version(settings) == v1


def test_a_later_verdict_replaces_the_recorded_decision_and_keeps_its_figures(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    decided = registry.register_version(settings, uri, run_id, {}, _decided("promote"))
    undecided = registry.register_version(settings, uri, run_id, {})
    revise_decision(settings, decided, "reject", "canary analysis: failing")
    revise_decision(settings, undecided, "reject", "canary analysis: failing")
    rows = {r["version"]: r for r in registry.list_versions(settings)}
    assert (rows[decided]["decision"], rows[decided]["decision_reason"]) == ("reject", "canary analysis: failing")
    assert rows[decided]["candidate_f1"] == "0.5000"
    assert "decision" not in rows[undecided]


def test_rollback_decides_from_the_recorded_moves_with_every_tag_deleted(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    v1, v2 = (registry.register_version(settings, uri, run_id, {}) for _ in range(2))
    registry.promote(settings, v1, expected=None, actor="alice", reason="first")
    registry.promote(settings, v2, expected=v1, actor="bob", reason="better | by far")
    before = registry.history(settings)
    assert delete_every_tag(settings) > 0
    assert registry.history(settings) == before
    assert [(c.alias, c.from_version, c.to_version, c.actor, c.reason) for c in before] == [
        ("production", None, v1, "alice", "first"), ("production", v1, v2, "bob", "better | by far")]
    change = registry.rollback(settings, actor="carol", reason="alert")
    assert (change.from_version, change.to_version) == (v2, v1)
    assert registry.alias_version(settings) == v1


def test_the_canary_share_is_the_recorded_one_not_the_tag(settings: Settings) -> None:
    uri, run_id = logged_model(settings)  # every version from one run: each version's share apart
    v1, v2, v3 = (registry.register_version(settings, uri, run_id, {}) for _ in range(3))
    registry.promote(settings, v1, expected=None, actor="alice")
    registry.start_canary(settings, v2, 10, actor="bob", reason="")
    registry.rollback(settings, actor="carol", reason="")
    registry.start_canary(settings, v3, 25, actor="bob", reason="")
    client = registry.client(settings)
    client.set_registered_model_tag(settings.model_name, registry.CANARY_PERCENT_TAG, "90")  # edited in the UI
    assert registry.canary(settings) == (v3, 25.0)
    client.delete_registered_model_tag(settings.model_name, registry.CANARY_PERCENT_TAG)
    assert registry.canary(settings) == (v3, 25.0)


@pytest.mark.parametrize("percent", [0, 100, -5])
def test_a_canary_share_outside_0_to_100_is_refused(settings: Settings, percent: float) -> None:
    uri, run_id = logged_model(settings)
    v1, v2 = (registry.register_version(settings, uri, run_id, {}) for _ in range(2))
    registry.promote(settings, v1, expected=None, actor="alice")
    with pytest.raises(InputError, match="between 0 and 100") as refused:
        registry.start_canary(settings, v2, percent, actor="bob", reason="")
    assert refused.value.field == "canary"  # the CLI option and the API field that were wrong
    assert registry.canary(settings) is None


def test_the_production_version_cannot_be_its_own_canary(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    v1 = registry.register_version(settings, uri, run_id, {})
    registry.promote(settings, v1, expected=None, actor="alice")
    with pytest.raises(PromotionConflictError, match="already holds"):
        registry.start_canary(settings, v1, 10, actor="bob", reason="")


def test_staging_moves_the_stage_with_the_alias(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    v1 = registry.register_version(settings, uri, run_id, {})
    registry.promote(settings, v1, alias=registry.STAGING_ALIAS, actor="pipeline")
    assert (registry.aliases(settings), _stage(settings, v1)) == ({"staging": v1}, "Staging")
