"""The deploy step's audit record says why evaluate promoted the version, word for word: a first
promotion that there was no model in production, a later one by how much it beat production."""

from __future__ import annotations

import mlflow
import mlflow.onnx
from onnx import TensorProto, helper

from mlops import registry
from mlops.registry_client import activate
from pipelines.orchestration.context import StepContext
from pipelines.orchestration.records import EvaluateRecord
from pipelines.orchestration.tasks import deploy_task
from pipelines.settings import PipelineSettings


def _registered(settings: PipelineSettings, production_at_evaluation: str) -> tuple[str, str]:
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["probability"])], "identity",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch"])],
                              [helper.make_tensor_value_info("probability", TensorProto.FLOAT, ["batch"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    experiment_id = registry.ensure_experiment(settings)
    activate(settings)  # log_model is fluent
    with mlflow.start_run(experiment_id=experiment_id) as run:
        info = mlflow.onnx.log_model(model, name="model", pip_requirements=["onnxruntime"])
    version = registry.register_version(settings, info.model_uri, run.info.run_id, {
        "decision": "promote", "production_version_at_evaluation": production_at_evaluation})
    return run.info.run_id, version


def test_the_audit_reason_is_the_evaluate_decisions_reason(settings: PipelineSettings) -> None:
    context = StepContext.of(settings)
    first_reason = "no model in production yet; PR-AUC 0.8123 above the floor 0.5"
    run_id, v1 = _registered(settings, "none")
    deploy_task(context, evaluated=EvaluateRecord(run_id=run_id, version=v1, decision="promote", reason=first_reason))
    second_reason = "PR-AUC 0.8400 vs production 0.8123: better by 0.0277, beyond the margin 0.02"
    run_id, v2 = _registered(settings, v1)
    deploy_task(context, evaluated=EvaluateRecord(run_id=run_id, version=v2, decision="promote", reason=second_reason))

    moves = [(c.from_version, c.to_version, c.reason) for c in registry.history(settings, settings.serving_alias)]
    assert moves == [(None, v1, first_reason), (v1, v2, second_reason)]
    description = registry.client(settings).get_registered_model(settings.model_name).description
    assert "no model in production yet" in description
    assert "better than production by the margin" not in description
