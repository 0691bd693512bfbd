"""Export step: the trained model to one ONNX file with a parity check, and the model into MLflow.

Its own step after training, so a distributed training job only trains; export runs once, on one
machine, from what rank 0 left in the out dir (``model.pt``, or another family's files; ``training.json``
names the family). :func:`export_step` is the one export of both the pipeline's
export task and ``mlops train``: the same out dir gives the same file, byte for byte.
"""

from __future__ import annotations

import hashlib
import logging
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import onnx
import pandas as pd

from mlops.calibration import CalibrationReport, calibration_report
from mlops.contract import DataContract
from mlops.onnx_export import write_served_graph
from mlops.registry import ONNX_FILE
from pipelines.training.families.models import FittedMLP, FittedModel, load_fitted
from pipelines.training.trained_model import TrainedModel, onnx_metadata

if TYPE_CHECKING:
    from mlflow.models.signature import ModelSignature

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExportResult:
    onnx_path: Path
    max_abs_diff: float

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.onnx_path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class ExportOutcome:
    export: ExportResult
    model_uri: str  # the logged ONNX model, ready to register
    metrics: dict[str, float]  # the raw score's calibration on the test split, as logged


def export_step(model_dir: Path, test: pd.DataFrame, contract: DataContract, onnx_dir: Path, tolerance: float,
                run_id: str) -> ExportOutcome:
    """The train step's out dir to ``onnx_dir/model.onnx``, parity-checked, logged to ``run_id`` with the
    uncalibrated score's Brier and ECE on ``test``."""
    trained = load_fitted(model_dir, contract)
    export = export_and_check(trained, contract, test, onnx_dir, tolerance, onnx_metadata(model_dir, contract))
    uncalibrated = uncalibrated_report(trained, contract, test)
    metrics = {"test_brier_uncalibrated": uncalibrated.brier, "test_ece_uncalibrated": uncalibrated.ece}
    return ExportOutcome(export=export, model_uri=log_model_to_mlflow(run_id, export, metrics), metrics=metrics)


def export_and_check(trained: TrainedModel | FittedModel, contract: DataContract, test: pd.DataFrame, out_dir: Path,
                     tolerance: float, metadata: dict[str, str]) -> ExportResult:
    """Export to ``out_dir/model.onnx`` and verify it scores ``test`` like the fitted model, within its
    family's parity rule (``tolerance`` is the MLP's).

    ``metadata`` should name inputs (dataset hash, training fingerprint), not a run: the same
    inputs then give the same file, byte for byte.
    """
    fitted = FittedMLP(trained, contract) if isinstance(trained, TrainedModel) else trained
    path = write_served_graph(fitted.scoring_graph(contract), contract, fitted.vocabs, Path(out_dir) / ONNX_FILE,
                              threshold=fitted.threshold, metadata={**metadata, "model_family": fitted.family})
    diff = fitted.check_parity(path, test, contract, tolerance)
    log.info("exported %s (%s); parity max abs diff %.3g", path, fitted.family, diff)
    return ExportResult(onnx_path=path, max_abs_diff=diff)


def uncalibrated_report(trained: FittedModel, contract: DataContract, frame: pd.DataFrame) -> CalibrationReport:
    """Brier and ECE of the score before calibration on ``frame``: the baseline calibration has to beat."""
    return calibration_report(frame[contract.label_column].to_numpy(), trained.uncalibrated_probability(frame))


def _signature_from_onnx(model: onnx.ModelProto) -> ModelSignature:
    """One [batch, 1] tensor per graph input, as the graph takes them.

    Tensor specs (not column specs) make MLflow reshape each column of a dataframe_split to
    [batch, 1], so `mlflow models serve` scores the registered model as it is.
    """
    import numpy as np
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import ColSpec, Schema, TensorSpec

    kinds = {onnx.TensorProto.FLOAT: np.dtype("float32"), onnx.TensorProto.STRING: np.dtype("O")}
    inputs: list[ColSpec | TensorSpec] = [
        TensorSpec(kinds[i.type.tensor_type.elem_type], (-1, 1), i.name) for i in model.graph.input
    ]
    outputs: list[ColSpec | TensorSpec] = [TensorSpec(np.dtype("float32"), (-1, 1), o.name)
                                           for o in model.graph.output]
    return ModelSignature(inputs=Schema(inputs), outputs=Schema(outputs))


def _runtime_requirements() -> list[str]:
    """Pinned requirements to score the logged model: onnx plus whichever onnxruntime is installed."""
    pins = [f"onnx=={onnx.__version__}"]
    for dist in ("onnxruntime-gpu", "onnxruntime"):
        try:
            return [*pins, f"{dist}=={metadata.version(dist)}"]
        except metadata.PackageNotFoundError:
            continue
    return pins


def log_model_to_mlflow(run_id: str, export: ExportResult, metrics: dict[str, float] | None = None) -> str:
    """Log the ONNX model (its hash, its parity and ``metrics``) to run ``run_id``; returns the model URI."""
    import mlflow
    import mlflow.onnx

    onnx_model = onnx.load_model(str(export.onnx_path))
    active = mlflow.active_run()
    # A caller may already have this run open (a pipeline step wrapping us); reuse it then.
    run_context: AbstractContextManager[object] = (
        nullcontext() if active is not None and active.info.run_id == run_id
        else mlflow.start_run(run_id=run_id, nested=active is not None)
    )
    with run_context:
        mlflow.log_metrics({"export_max_abs_diff": export.max_abs_diff, **(metrics or {})})
        mlflow.set_tag("onnx_sha256", export.sha256)
        info = mlflow.onnx.log_model(
            onnx_model,
            name="model",
            signature=_signature_from_onnx(onnx_model),
            save_as_external_data=False,
            # Stated, not inferred: inference re-imports the model in a subprocess (seconds).
            pip_requirements=_runtime_requirements(),
        )
    return str(info.model_uri)
