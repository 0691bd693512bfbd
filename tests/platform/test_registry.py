"""mlops.registry against a real MLflow SQLite store: experiment location, register, promote."""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from mlops import registry
from mlops.errors import ModelNotReadyError, NotFoundError, PromotionConflictError, RegistryError
from mlops.settings import Settings


def _identity_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["probability"])], "identity",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch"])],
        [helper.make_tensor_value_info("probability", TensorProto.FLOAT, ["batch"])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


@pytest.fixture
def settings(mlflow_home: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return Settings(home=mlflow_home)


def _logged_model(settings: Settings) -> tuple[str, str]:
    import mlflow.onnx

    experiment_id = registry.ensure_experiment(settings)
    with mlflow.start_run(experiment_id=experiment_id) as run:
        info = mlflow.onnx.log_model(_identity_model(), name="model", pip_requirements=["onnxruntime"])
    return info.model_uri, run.info.run_id


def test_experiment_artifacts_live_under_home(settings: Settings) -> None:
    experiment_id = registry.ensure_experiment(settings)
    assert registry.ensure_experiment(settings) == experiment_id
    location = registry.client(settings).get_experiment(experiment_id).artifact_location
    assert location == settings.artifact_root.as_uri()


def test_no_alias_means_not_ready(settings: Settings, tmp_path: Path) -> None:
    registry.ensure_experiment(settings)
    assert registry.alias_version(settings) is None
    with pytest.raises(ModelNotReadyError, match="holds alias 'production'"):
        registry.download_serving_model(settings, tmp_path / "dl")


def test_promote_moves_alias_and_stage_and_archives_previous(settings: Settings, tmp_path: Path) -> None:
    first_uri, first_run = _logged_model(settings)
    second_uri, second_run = _logged_model(settings)
    v1 = registry.register_version(settings, first_uri, first_run, {"decision": "promote"})
    v2 = registry.register_version(settings, second_uri, second_run, {"decision": "promote"})
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
    assert (served.version, served.run_id) == (v2, second_run)
    assert onnx.load(str(served.onnx_path)).graph.node[0].op_type == "Identity"
    rows = registry.list_versions(settings)
    assert [r["version"] for r in rows] == [v2, v1]
    assert rows[0]["aliases"] == "production"
    assert rows[1]["decision"] == "promote"


def test_missing_version_is_not_found(settings: Settings, tmp_path: Path) -> None:
    uri, run_id = _logged_model(settings)
    registry.register_version(settings, uri, run_id, {})
    with pytest.raises(NotFoundError, match="version 7 not found"):
        registry.download_version(settings, "7", tmp_path / "dl")


def test_every_move_is_audited_and_rollback_returns_to_the_previous_version(settings: Settings) -> None:
    uri, run_id = _logged_model(settings)
    v1, v2 = (registry.register_version(settings, uri, run_id, {}) for _ in range(2))
    registry.promote(settings, v1, expected=None, actor="alice", reason="first model")
    registry.promote(settings, v2, expected=v1, actor="bob", reason="better F1")

    change = registry.rollback(settings, actor="carol", reason="alert fired")

    assert registry.alias_version(settings) == v1
    assert (change.from_version, change.to_version, change.actor, change.reason) == (v2, v1, "carol", "alert fired")
    assert [(c.from_version, c.to_version, c.actor) for c in registry.history(settings)] == [
        (None, v1, "alice"), (v1, v2, "bob"), (v2, v1, "carol")]


def test_a_stale_expectation_moves_nothing(settings: Settings) -> None:
    uri, run_id = _logged_model(settings)
    v1, v2 = (registry.register_version(settings, uri, run_id, {}) for _ in range(2))
    registry.promote(settings, v1, expected=None, actor="test")

    with pytest.raises(PromotionConflictError, match="expected none, now 1"):
        registry.promote(settings, v2, expected=None, actor="evaluate saw no production model")

    assert registry.alias_version(settings) == v1
    assert len(registry.history(settings)) == 1


def test_an_unreachable_registry_is_an_error_never_no_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A dead link where the SQLite file's folder should be: MLflow can neither open nor create it.
    dead = tmp_path / "dead-link"
    dead.symlink_to(tmp_path / "nowhere")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    outage = Settings(home=tmp_path / "home", tracking_uri=f"sqlite:///{dead}/mlflow.db")

    with pytest.raises(RegistryError, match="registry"):
        registry.alias_version(outage)
    with pytest.raises(RegistryError):
        registry.promote(outage, "1", expected=None, actor="pipeline")
    with pytest.raises(RegistryError):
        registry.list_versions(outage)
