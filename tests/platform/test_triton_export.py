"""A Triton model repository from a registered version: the config parses with Triton's own
model_config schema (text format) and names every graph input and output with its datatype and
dims; `mlops model export --format triton` writes it from the real registry."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from google.protobuf import text_format
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2
from typer.testing import CliRunner

from mlops import registry
from mlops.errors import InputError
from mlops.registry_client import activate
from mlops.settings import Settings
from mlops.triton_export import write_repository
from mlops_cli.app import app

pytestmark = pytest.mark.unit

runner = CliRunner()
_TYPES = {TensorProto.FLOAT: "TYPE_FP32", TensorProto.STRING: "TYPE_STRING", TensorProto.INT64: "TYPE_INT64"}


def _graph() -> onnx.ModelProto:
    """Float, integer and string inputs of different widths, one output; like the exported fraud model."""
    inputs = [helper.make_tensor_value_info("amount", TensorProto.FLOAT, ["batch", 1]),
              helper.make_tensor_value_info("hour_window", TensorProto.INT64, ["batch", 24]),
              helper.make_tensor_value_info("channel", TensorProto.STRING, ["batch", 1])]
    graph = helper.make_graph([helper.make_node("Identity", ["amount"], ["probability"])], "fraud-like", inputs,
                              [helper.make_tensor_value_info("probability", TensorProto.FLOAT, ["batch", 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _config(model_dir: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse((model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def test_the_config_names_every_graph_tensor_with_its_type_and_dims(tmp_path: Path) -> None:
    graph = _graph()
    onnx.save(graph, tmp_path / "model.onnx")

    model_dir = write_repository(tmp_path / "model.onnx", tmp_path / "repo", "fraud-detector", "3", max_batch_size=64)
    config = _config(model_dir)

    expected = [(i.name, _TYPES[i.type.tensor_type.elem_type], [d.dim_value for d in i.type.tensor_type.shape.dim[1:]])
                for i in graph.graph.input]
    assert [(i.name, model_config_pb2.DataType.Name(i.data_type), list(i.dims)) for i in config.input] == expected
    assert [(o.name, list(o.dims)) for o in config.output] == [("probability", [1])]
    assert (config.name, config.platform, config.max_batch_size) == ("fraud-detector", "onnxruntime_onnx", 64)
    assert config.HasField("dynamic_batching")
    assert (model_dir / "3" / "model.onnx").read_bytes() == (tmp_path / "model.onnx").read_bytes()


def test_a_version_that_is_not_a_positive_integer_is_refused(tmp_path: Path) -> None:
    onnx.save(_graph(), tmp_path / "model.onnx")
    with pytest.raises(InputError, match="positive integer"):
        write_repository(tmp_path / "model.onnx", tmp_path / "repo", "fraud-detector", "0")


def test_the_cli_exports_the_serving_version_from_the_registry(settings: Settings, tmp_path: Path) -> None:
    import mlflow.onnx

    experiment_id = registry.ensure_experiment(settings)
    activate(settings)  # log_model is fluent
    with mlflow.start_run(experiment_id=experiment_id) as run:
        info = mlflow.onnx.log_model(_graph(), name="model", pip_requirements=["onnxruntime"])
    version = registry.register_version(settings, info.model_uri, run.info.run_id, {})
    registry.promote(settings, version, expected=None, actor="test")

    result = runner.invoke(app, ["model", "export", "--format", "triton", str(tmp_path / "repo")])

    assert result.exit_code == 0, result.output
    config = _config(tmp_path / "repo" / settings.model_name)
    assert [i.name for i in config.input] == ["amount", "hour_window", "channel"]
    assert onnx.load(str(tmp_path / "repo" / settings.model_name / version / "model.onnx")).graph.name == "fraud-like"


@pytest.mark.parametrize(("args", "message"), [
    (["--format", "torchserve"], "--format must be one of triton"),
    (["--version", "latest"], "--version must be a version number"),
])
def test_bad_export_options_are_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["model", "export", str(tmp_path / "repo"), *args])
    assert result.exit_code == 2
    assert message in result.output
