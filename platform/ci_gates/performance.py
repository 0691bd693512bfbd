"""The model-performance gate: the candidate's test F1 reaches an absolute floor and is not below
the production champion's, both scored here on the candidate's own test split.

The candidate is the newest registered version (what the last pipeline run registered) unless
one is named. Each model is scored at its own threshold with the evaluate step's metric function.
Registry reads fail closed: an unreachable registry is a failed gate, never "no champion".
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ci_gates.outcome import GateOutcome, failed, passed
from ci_gates.settings import GateSettings
from mlops import registry
from mlops.errors import NotFoundError, RegistryError
from mlops.registry_client import Registry, connect

GATE = "performance"


def performance_gate(settings: GateSettings, candidate: str | None = None) -> GateOutcome:
    """Score the candidate (default: newest version) and the champion on the candidate's test split."""
    import pandas as pd

    from mlops.contract import load_contract
    from mlops.inference import OnnxModel
    from pipelines.steps.evaluate import compute_metrics

    versions = registry.list_versions(settings)
    if not versions:
        raise NotFoundError(f"no registered version of {settings.model_name!r}; run the pipeline first")
    candidate = candidate or versions[0]["version"]
    champion = registry.alias_version(settings)
    contract = load_contract(settings.contract_path)
    with tempfile.TemporaryDirectory() as tmp:
        served = registry.download_version(settings, candidate, Path(tmp) / "candidate")
        if served.run_id is None:
            raise NotFoundError(f"version {candidate} has no run, so no test split to score it on")
        test = pd.read_parquet(_test_split(connect(settings), served.run_id, candidate, Path(tmp) / "data"))
        labels = test[contract.label_column].to_numpy().astype(int)

        def f1_of(path: Path) -> float:
            model = OnnxModel(path)
            return compute_metrics(labels, model.predict_proba(test), model.threshold).f1

        candidate_f1 = f1_of(served.onnx_path)
        champion_f1 = None
        if champion is not None:
            champion_f1 = f1_of(registry.download_version(settings, champion, Path(tmp) / "champion").onnx_path)
    floor = settings.gate_min_f1
    against = (f"champion v{champion} ({settings.serving_alias}) {champion_f1:.4f}" if champion_f1 is not None
               else f"no champion (nothing holds alias {settings.serving_alias!r})")
    checked = (f"candidate v{candidate} test F1 {candidate_f1:.4f}, floor {floor:.4f}, {against}, "
               f"on v{candidate}'s test split ({len(test):,} rows, {int(labels.sum())} positives)")
    reasons = []
    if candidate_f1 < floor:
        reasons.append(f"F1 {candidate_f1:.4f} is below the floor {floor:.4f} (MLOPS_GATE_MIN_F1)")
    if champion_f1 is not None and candidate_f1 < champion_f1:
        reasons.append(f"F1 {candidate_f1:.4f} is below champion v{champion}'s {champion_f1:.4f}")
    return failed(GATE, checked, "; ".join(reasons)) if reasons else passed(GATE, checked)


def _test_split(stores: Registry, run_id: str, version: str, into: Path) -> Path:
    """The candidate run's logged test split (``training_data/test.parquet``, or ``test`` from a pipeline run)."""
    from mlflow.exceptions import MlflowException

    from pipelines.training.command import logged_split
    from pipelines.training.tracking import TRAINING_DATA_ARTIFACTS

    try:
        folder = stores.download(into, run_id=run_id, artifact_path=TRAINING_DATA_ARTIFACTS)
    except MlflowException as exc:
        if getattr(exc, "error_code", "") != "RESOURCE_DOES_NOT_EXIST":
            raise RegistryError(f"tracking store failed reading run {run_id}'s test split: {exc.message}") from exc
        folder = into / "missing"
    except OSError:  # a local artifact store answers a missing folder with the filesystem's error
        folder = into / "missing"
    path = logged_split(folder, "test")
    if not path.is_file():
        raise NotFoundError(f"version {version}'s run {run_id} logged no test split under {TRAINING_DATA_ARTIFACTS}/")
    return path
