"""Parity of the MLP's graph with an isotonic map after its logit (issue 40, point 2): a steep segment of
the map multiplies the float32 rounding of the network's logit, so served and torch-through-the-map
differ beyond the tolerance on rows where the graph is right (a three-million-row pipeline stopped at
export on 4.8e-5 over 450,000 test rows). The check judges the network and the map apart, each
strictly, and the decisions of the whole; a wrong network or a wrong map still stops the export."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
import torch
from onnx import numpy_helper

from mlops import inference
from mlops.contract import DataContract
from mlops.data.generator import generate_transactions
from mlops.errors import ExportParityError
from mlops.feature_replay import replay_features
from mlops.inference import OnnxModel
from mlops.model import TabularMLP, encode, fit_vocabularies
from mlops.onnx_export import write_served_graph
from pipelines.training.calibrators import Calibrator
from pipelines.training.families.models import check_calibrated_parity, logit_graph_calibrated

pytestmark = pytest.mark.unit

TOLERANCE = 1e-5
STEEP_ROWS = 40  # rows whose logits the steep segment spans


@pytest.fixture(scope="module")
def frame(contract: DataContract) -> pd.DataFrame:
    rows = generate_transactions(3000, seed=21)
    return pd.concat([rows, replay_features(rows, contract)], axis=1)


@pytest.fixture(scope="module")
def network(frame: pd.DataFrame, contract: DataContract) -> tuple[TabularMLP, np.ndarray]:
    """A seeded network whose scaler saw the frame, and its torch logits (float32, as float64)."""
    vocabs = fit_vocabularies(contract)
    torch.manual_seed(3)
    net = TabularMLP.for_contract(contract, vocabs)
    numeric, categorical = encode(frame, contract, vocabs)
    net.fit_scaler(numeric)
    with torch.no_grad():
        logits = net.eval().logits(torch.as_tensor(numeric), torch.as_tensor(categorical)).numpy()
    return net, np.asarray(logits, dtype=np.float64)


def _steep_map(logits: np.ndarray) -> Calibrator:
    """A map rising 0.9 across the logits of :data:`STEEP_ROWS` middle rows, gentle elsewhere."""
    ordered = np.sort(logits)
    middle = len(ordered) // 2
    low, high = float(ordered[middle]), float(ordered[middle + STEEP_ROWS])
    x = np.array([ordered[0] - 1, low, high, ordered[-1] + 1], dtype=np.float32).astype(np.float64)
    return Calibrator("isotonic", knots=(tuple(float(v) for v in x), (0.01, 0.05, 0.95, 0.99)))


def _export(net: TabularMLP, contract: DataContract, calibrator: Calibrator, path: Path) -> Path:
    """The served graph: the preprocessing head, the network's logit, the map."""
    return write_served_graph(logit_graph_calibrated(net, contract, calibrator), contract, fit_vocabularies(contract),
                              path, threshold=0.5, metadata={})


@pytest.fixture(scope="module")
def steep(network: tuple[TabularMLP, np.ndarray], contract: DataContract,
          tmp_path_factory: pytest.TempPathFactory) -> tuple[Calibrator, Path]:
    """The steep map and the served graph of the network followed by it (one export for the module)."""
    calibrator = _steep_map(network[1])
    return calibrator, _export(network[0], contract, calibrator, tmp_path_factory.mktemp("steep") / "model.onnx")


def test_a_steep_map_over_a_right_graph_passes(network: tuple[TabularMLP, np.ndarray], frame: pd.DataFrame,
                                               steep: tuple[Calibrator, Path]) -> None:
    logits, (calibrator, path) = network[1], steep
    end_to_end = np.abs(OnnxModel(path).predict_proba(frame).astype(np.float64) - calibrator.apply(logits))
    assert end_to_end.max() > TOLERANCE  # what the old check judged, and stopped the export on
    assert check_calibrated_parity(logits, calibrator, path, frame, threshold=0.5, tolerance=TOLERANCE) <= TOLERANCE


def test_a_map_the_graph_got_wrong_stops_the_export(network: tuple[TabularMLP, np.ndarray], frame: pd.DataFrame,
                                                    steep: tuple[Calibrator, Path], tmp_path: Path) -> None:
    logits, (calibrator, path) = network[1], steep
    graph = onnx.load(str(path))
    [knots_y] = [t for t in graph.graph.initializer if t.name.endswith("iso_y")]  # the map's values at its knots
    knots_y.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(knots_y) + np.float32(1e-3), knots_y.name))
    onnx.save(graph, str(tmp_path / "wrong-map.onnx"))
    with pytest.raises(ExportParityError, match=r"isotonic map: network max abs diff \S+, map 0.001"):
        check_calibrated_parity(logits, calibrator, tmp_path / "wrong-map.onnx", frame, 0.5, TOLERANCE)


def test_a_network_the_graph_got_wrong_stops_the_export(network: tuple[TabularMLP, np.ndarray],
                                                        frame: pd.DataFrame, steep: tuple[Calibrator, Path]) -> None:
    logits, (calibrator, path) = network[1], steep
    with pytest.raises(ExportParityError, match="network max abs diff"):
        check_calibrated_parity(logits + 0.05, calibrator, path, frame, 0.5, TOLERANCE)


def test_a_constant_map_at_the_threshold_is_a_tie_not_a_flip(network: tuple[TabularMLP, np.ndarray],
                                                             frame: pd.DataFrame, contract: DataContract,
                                                             tmp_path: Path) -> None:
    """0.02 in float64 is 0.0199999996 in float32: every row on the other side of a threshold of 0.02."""
    net, logits = network
    constant = Calibrator("isotonic", knots=((-1.0, 1.0), (0.02, 0.02)))
    path = _export(net, contract, constant, tmp_path / "model.onnx")
    assert check_calibrated_parity(logits, constant, path, frame, threshold=0.02, tolerance=TOLERANCE) <= TOLERANCE


def test_the_check_reads_the_graph_a_slice_at_a_time_as_in_one_call(
        network: tuple[TabularMLP, np.ndarray], frame: pd.DataFrame, steep: tuple[Calibrator, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A ten-million-row run's test split is read in slices (its graph's scratch memory grows faster than its
    rows): the network's logit and the served probability, joined back, judge as one call does."""
    logits, (calibrator, path) = network[1], steep
    whole = check_calibrated_parity(logits, calibrator, path, frame, threshold=0.5, tolerance=TOLERANCE)
    monkeypatch.setattr(inference, "RUN_ROWS", 7)
    assert check_calibrated_parity(logits, calibrator, path, frame, threshold=0.5, tolerance=TOLERANCE) == whole
