"""A tiny ONNX model logged to a real MLflow store, for the registry's tests."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from mlops import registry
from mlops.registry_client import activate
from mlops.settings import Settings


def identity_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["probability"])], "identity",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch"])],
        [helper.make_tensor_value_info("probability", TensorProto.FLOAT, ["batch"])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def logged_model(settings: Settings) -> tuple[str, str]:
    """The model URI and run id of the identity model logged in a new run of the settings' experiment."""
    import mlflow.onnx

    experiment_id = registry.ensure_experiment(settings)
    activate(settings)  # log_model is fluent
    with mlflow.start_run(experiment_id=experiment_id) as run:
        info = mlflow.onnx.log_model(identity_model(), name="model", pip_requirements=["onnxruntime"])
    return info.model_uri, run.info.run_id
