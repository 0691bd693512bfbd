"""Model definition, ONNX export with in-graph preprocessing, parity, and the torch-free scorer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
import torch
from onnx import TensorProto, numpy_helper

from mlops import inference
from mlops.contract import DataContract
from mlops.data.generator import generate_transactions
from mlops.errors import ExportParityError, InputError
from mlops.feature_replay import replay_features
from mlops.inference import OnnxModel
from mlops.model import UNKNOWN_INDEX, TabularMLP, encode, fit_vocabularies
from mlops.onnx_export import check_parity, export_onnx

THRESHOLD = 0.37



@pytest.fixture(scope="module")
def vocabs(contract: DataContract) -> dict[str, list[str]]:
    return fit_vocabularies(contract)


@pytest.fixture(scope="module")
def frame(contract: DataContract) -> pd.DataFrame:
    """Generated transactions plus the contract's features, as serving computes them."""
    df = generate_transactions(3000, seed=7)
    df = pd.concat([df, replay_features(df, contract)], axis=1)
    assert set(contract.feature_names) <= set(df.columns)
    return df


@pytest.fixture(scope="module")
def model(frame: pd.DataFrame, contract: DataContract, vocabs: dict[str, list[str]]) -> TabularMLP:
    torch.manual_seed(0)
    net = TabularMLP.for_contract(contract, vocabs)
    net.fit_scaler(encode(frame, contract, vocabs)[0])
    return net.eval()


@pytest.fixture(scope="module")
def onnx_path(
    model: TabularMLP, contract: DataContract, vocabs: dict[str, list[str]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    out = tmp_path_factory.mktemp("export") / "model.onnx"
    return export_onnx(model, contract, vocabs, out, threshold=THRESHOLD, metadata={"git_commit": "abc123"})


@pytest.mark.unit
def test_vocabularies_come_from_the_contract(contract: DataContract, vocabs: dict[str, list[str]]) -> None:
    assert list(vocabs) == list(contract.model_inputs.categorical)
    assert vocabs["channel"] == list(contract.column("channel").categories or ())


@pytest.mark.unit
def test_encode_maps_unknown_categories_to_index_zero(
    frame: pd.DataFrame, contract: DataContract, vocabs: dict[str, list[str]]
) -> None:
    rows = frame.head(2).copy()
    rows["country"] = ["ZZ", vocabs["country"][0]]
    numeric, categorical = encode(rows, contract, vocabs)
    assert numeric.dtype == np.float32
    assert numeric.shape == (2, len(contract.numeric_inputs))
    assert categorical.dtype == np.int64
    country = list(contract.model_inputs.categorical).index("country")
    assert categorical[:, country].tolist() == [UNKNOWN_INDEX, 1]


@pytest.mark.unit
def test_scaler_floors_std_and_forward_is_sigmoid_of_logits(
    contract: DataContract, vocabs: dict[str, list[str]]
) -> None:
    net = TabularMLP.for_contract(contract, vocabs).eval()
    numeric = np.ones((5, len(contract.numeric_inputs)), np.float32)  # constant: std 0 before the floor
    net.fit_scaler(numeric)
    assert float(net.std.min()) == pytest.approx(1e-6)
    x, c = torch.as_tensor(numeric), torch.zeros(5, len(vocabs), dtype=torch.int64)
    assert torch.allclose(net(x, c), torch.sigmoid(net.logits(x, c)))


@pytest.mark.unit
def test_export_matches_torch_within_tolerance(
    model: TabularMLP, onnx_path: Path, frame: pd.DataFrame, contract: DataContract,
    vocabs: dict[str, list[str]],
) -> None:
    assert check_parity(model, onnx_path, frame, contract, vocabs, tolerance=1e-5) <= 1e-5


@pytest.mark.unit
def test_graph_takes_raw_fields_with_dynamic_batch(onnx_path: Path, contract: DataContract) -> None:
    graph = onnx.load(str(onnx_path)).graph
    categorical = list(contract.model_inputs.categorical)
    assert [i.name for i in graph.input] == contract.numeric_inputs + categorical
    for value in graph.input:
        tensor = value.type.tensor_type
        expected = TensorProto.STRING if value.name in categorical else TensorProto.FLOAT
        assert tensor.elem_type == expected, value.name
        assert [d.dim_param or d.dim_value for d in tensor.shape.dim] == ["batch", 1], value.name
    [output] = graph.output
    assert output.name == "probability"
    assert output.type.tensor_type.elem_type == TensorProto.FLOAT
    assert [d.dim_param for d in output.type.tensor_type.shape.dim] == ["batch"]


@pytest.mark.unit
def test_scores_any_batch_size_the_same(onnx_path: Path, frame: pd.DataFrame) -> None:
    scorer = OnnxModel(onnx_path)
    full = scorer.predict_proba(frame.head(37))
    assert full.shape == (37,)
    assert scorer.predict_proba(frame.head(1)).shape == (1,)
    np.testing.assert_allclose(scorer.predict_proba(frame.iloc[[5]]), full[[5]], atol=1e-6)
    # Each row is scored on its own: reversing the batch only reverses the scores.
    np.testing.assert_allclose(scorer.predict_proba(frame.head(37).iloc[::-1]), full[::-1], atol=1e-6)


@pytest.mark.unit
def test_unknown_category_scores_as_unknown(
    model: TabularMLP, onnx_path: Path, frame: pd.DataFrame, contract: DataContract,
    vocabs: dict[str, list[str]],
) -> None:
    rows = frame.head(3).copy()
    rows["country"] = "ZZ"
    rows["merchant_category"] = "crypto"
    scores = OnnxModel(onnx_path).predict_proba(rows)
    expected = model.predict_proba(*encode(rows, contract, vocabs))
    np.testing.assert_allclose(scores, expected, atol=1e-6, equal_nan=False)


@pytest.mark.unit
def test_onnx_metadata_carries_threshold_contract_commit_and_inputs(onnx_path: Path, contract: DataContract) -> None:
    scorer = OnnxModel(onnx_path)
    assert scorer.threshold == THRESHOLD
    assert scorer.metadata["contract"] == contract.name
    assert scorer.metadata["git_commit"] == "abc123"
    assert json.loads(scorer.metadata["input_names"]) == scorer.input_names
    assert scorer.providers[-1] == "CPUExecutionProvider"


@pytest.mark.unit
def test_scores_plain_dict_records_like_a_frame(onnx_path: Path, frame: pd.DataFrame) -> None:
    scorer = OnnxModel(onnx_path)
    rows = frame.head(4)
    records = [{str(k): v for k, v in row.items()} for row in rows[scorer.input_names].to_dict("records")]
    np.testing.assert_array_equal(scorer.predict_proba(records), scorer.predict_proba(rows))
    feed = scorer.build_feed(records)
    assert feed["amount"].dtype == np.float32
    assert feed["amount"].shape == (4, 1)
    assert feed["country"].dtype == object
    assert feed["country"].shape == (4, 1)


@pytest.mark.unit
def test_missing_field_is_an_input_error(onnx_path: Path, frame: pd.DataFrame) -> None:
    with pytest.raises(InputError, match="amount") as info:
        OnnxModel(onnx_path).predict_proba(frame.drop(columns=["amount"]).head(2))
    assert info.value.field == "amount"


@pytest.mark.unit
def test_tampered_graph_fails_parity(
    model: TabularMLP, onnx_path: Path, frame: pd.DataFrame, contract: DataContract,
    vocabs: dict[str, list[str]], tmp_path: Path,
) -> None:
    tampered = onnx.load(str(onnx_path))
    [bias] = [t for t in tampered.graph.initializer if t.name.endswith("mlp.6.bias")]
    bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias) + np.float32(0.5), bias.name))
    path = tmp_path / "tampered.onnx"
    onnx.save(tampered, str(path))
    with pytest.raises(ExportParityError, match="max abs diff"):
        check_parity(model, path, frame, contract, vocabs, tolerance=1e-5)


@pytest.mark.integration
def test_inference_module_never_imports_torch() -> None:
    code = "import mlops.inference, sys; assert 'torch' not in sys.modules, 'torch was imported'"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.unit
def test_a_batch_job_is_scored_a_slice_at_a_time_as_in_one_call(onnx_path: Path, frame: pd.DataFrame,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    scorer = OnnxModel(onnx_path)
    whole = scorer.predict_proba(frame)
    monkeypatch.setattr(inference, "RUN_ROWS", 7)  # 3,000 rows: 428 slices of 7 and one of 4
    sliced = scorer.predict_proba(frame)
    assert sliced.shape == whole.shape == (len(frame),)
    np.testing.assert_allclose(sliced, whole, rtol=0, atol=1e-6)
