"""`mlops model promote | rollback | history` and `mlops serve` refusals, against a real SQLite registry."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from mlops import registry
from mlops.registry_client import activate
from mlops.settings import Settings
from mlops_cli.app import app

pytestmark = pytest.mark.integration

runner = CliRunner()


def _two_versions(settings: Settings) -> tuple[str, str]:
    import mlflow.onnx

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["probability"])], "identity",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch"])],
                              [helper.make_tensor_value_info("probability", TensorProto.FLOAT, ["batch"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    experiment_id = registry.ensure_experiment(settings)
    activate(settings)  # log_model is fluent
    with mlflow.start_run(experiment_id=experiment_id) as run:
        info = mlflow.onnx.log_model(model, name="model", pip_requirements=["onnxruntime"])
    first = registry.register_version(settings, info.model_uri, run.info.run_id, {})
    second = registry.register_version(settings, info.model_uri, run.info.run_id, {})
    return first, second


def test_promote_rollback_and_history(settings: Settings) -> None:
    v1, v2 = _two_versions(settings)

    first = runner.invoke(app, ["model", "promote", v1, "--reason", "initial"])
    second = runner.invoke(app, ["model", "promote", v2, "--reason", "better"])
    back = runner.invoke(app, ["model", "rollback", "--reason", "alert"])
    history = runner.invoke(app, ["model", "history"])

    assert [r.exit_code for r in (first, second, back, history)] == [0, 0, 0, 0], history.output
    assert f"none -> {v1}" in first.output
    assert f"{v2} -> {v1}" in back.output
    assert registry.alias_version(settings) == v1
    for reason in ("initial", "better", "alert"):
        assert reason in history.output


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        (["model", "promote", "seven"], "VERSION must be a version number, got 'seven'", 2),
        (["model", "promote", "9"], "version 9 not found", 4),
        (["model", "rollback"], "no earlier version to roll back to", 1),
    ],
)
def test_bad_moves_are_one_line_errors(settings: Settings, args: list[str], message: str, code: int) -> None:
    _two_versions(settings)

    result = runner.invoke(app, args)

    assert result.exit_code == code, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert registry.alias_version(settings) is None


@pytest.mark.parametrize(("token", "message"), [
    (None, "MLOPS_ADMIN_TOKEN is not set"),
    ("", "MLOPS_ADMIN_TOKEN is not set (or empty)"),
    ("short-token", "MLOPS_ADMIN_TOKEN has 11 characters; outside dev mode it needs at least 16"),
])
def test_serve_refuses_to_start_outside_dev_mode_without_a_strong_token(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, token: str | None, message: str
) -> None:
    monkeypatch.setenv("MLOPS_DEV_MODE", "false")
    if token is not None:
        monkeypatch.setenv("MLOPS_ADMIN_TOKEN", token)

    result = runner.invoke(app, ["serve"])

    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output
