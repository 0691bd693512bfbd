"""Training and evaluation decisions on data where they matter: noisy labels, so no threshold, epoch
count or class weighting is right by accident.

The shared ``splits`` fixture is nearly separable (ROC-AUC close to 1): any threshold passes, early
stopping never fires and unweighted training does as well. Here a quarter of the frauds are
relabelled legit and as many legit rows fraud, which caps what any model can reach and makes
each decision visible in the result.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch

from mlops import registry
from mlops.contract import DataContract
from mlops.data.generator import generate_transactions
from mlops.feature_replay import replay_features
from mlops.inference import OnnxModel
from mlops.model import TabularMLP, encode, fit_vocabularies
from mlops.onnx_export import export_onnx
from mlops.registry_client import activate
from pipelines.orchestration.context import StepContext
from pipelines.orchestration.records import ExportRecord
from pipelines.orchestration.tasks import evaluate_task
from pipelines.settings import PipelineSettings
from pipelines.steps.evaluate import EvaluationReport, QualityGates, evaluate
from pipelines.training.entry import run_training
from pipelines.training.export import ExportResult, log_model_to_mlflow
from pipelines.training.thresholds import best_f1_threshold, between_scores_threshold
from pipelines.training.trainer import TrainParams, TrainResult, train_model

Splits = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]

LABEL_NOISE = 0.25  # share of frauds relabelled legit; as many legit rows become fraud
SETTINGS = PipelineSettings(seed=11, max_epochs=20, patience=2, batch_size=128, learning_rate=1e-2, device="cpu")
PARAMS = TrainParams.from_settings(SETTINGS)
# Gates that never block: these tests are about the F1 rule and the thresholds.
NO_GATES = QualityGates(slice_f1_tolerance=1.0, slice_min_positives=1_000_000)


@pytest.fixture(scope="module")
def noisy(contract: DataContract) -> Splits:
    raw = generate_transactions(3000, seed=7, fraud_rate=0.06)
    frame = pd.concat([raw, replay_features(raw, contract)], axis=1)
    rng = np.random.default_rng(0)
    labels = frame[contract.label_column].to_numpy().copy()
    frauds, legit = np.flatnonzero(labels == 1), np.flatnonzero(labels == 0)
    flipped = int(len(frauds) * LABEL_NOISE)
    labels[rng.choice(frauds, flipped, replace=False)] = 0
    labels[rng.choice(legit, flipped, replace=False)] = 1
    # Features are computed; shuffling now spreads the noisy frauds evenly over the three splits.
    frame = frame.assign(**{contract.label_column: labels}).sample(frac=1.0, random_state=1)
    n = len(frame)
    return frame.iloc[: int(n * 0.6)], frame.iloc[int(n * 0.6): int(n * 0.8)], frame.iloc[int(n * 0.8):]


@pytest.fixture(scope="module")
def trained(noisy: Splits, contract: DataContract) -> TrainResult:
    return train_model(noisy[0], noisy[1], contract, PARAMS)


@pytest.fixture(scope="module")
def onnx_at(trained: TrainResult, contract: DataContract, tmp_path_factory: pytest.TempPathFactory,
            ) -> dict[str, OnnxModel]:
    """The trained model exported twice: at its own F1-best threshold and at 0.5."""
    out = tmp_path_factory.mktemp("thresholds")
    return {name: OnnxModel(export_onnx(trained.model, contract, trained.vocabs, out / f"{name}.onnx",
                                        threshold=threshold, metadata={}))
            for name, threshold in (("best", trained.threshold), ("half", 0.5))}


def _f1_by_counting(labels: np.ndarray, proba: np.ndarray, threshold: float) -> float:
    flagged = proba >= threshold
    tp = int(np.sum(flagged & (labels == 1)))
    fp = int(np.sum(flagged & (labels == 0)))
    fn = int(np.sum(~flagged & (labels == 1)))
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def _calibrated(result: TrainResult, frame: pd.DataFrame, contract: DataContract) -> np.ndarray:
    return result.model.predict_proba(*encode(frame, contract, result.vocabs))


def _mlp_weights(model: TabularMLP) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.mlp.parameters()]


@pytest.mark.integration
def test_noisy_fixture_is_not_separable(trained: TrainResult) -> None:
    # The premise of every test below: a model can rank these rows only partly right.
    assert 0.6 < trained.best.val_roc_auc < 0.95


@pytest.mark.integration
def test_early_stopping_fires_patience_epochs_after_the_best(trained: TrainResult) -> None:
    epochs = len(trained.history)
    assert epochs < PARAMS.max_epochs
    assert epochs == trained.best_epoch + PARAMS.patience
    pr_aucs = [m.val_pr_auc for m in trained.history]
    assert all(later <= trained.best.val_pr_auc for later in pr_aucs[trained.best_epoch:])


@pytest.mark.integration
def test_class_weights_lift_raw_scores_above_the_fraud_rate(
    trained: TrainResult, noisy: Splits, contract: DataContract
) -> None:
    train = noisy[0]
    numeric, categorical = encode(train, contract, trained.vocabs)
    with torch.no_grad():
        logits = trained.model.logits(torch.as_tensor(numeric), torch.as_tensor(categorical))
    raw_mean = float(torch.sigmoid(logits).mean())
    fraud_rate = float(train[contract.label_column].mean())
    # Unweighted cross-entropy drives the mean raw score to the fraud rate (the bias gradient is
    # their difference); weighting frauds by negatives/positives pulls it several times higher.
    assert raw_mean > 3 * fraud_rate
    # Platt scaling has to pull the weighted scores back down: a clearly negative bias.
    assert float(trained.model.calibration[1]) < -1.0


@pytest.mark.integration
def test_chosen_threshold_maximises_validation_f1(
    trained: TrainResult, noisy: Splits, contract: DataContract
) -> None:
    val = noisy[1]
    labels = val[contract.label_column].to_numpy()
    proba = _calibrated(trained, val, contract)
    f1_at = {float(t): _f1_by_counting(labels, proba, float(t)) for t in np.unique(proba)}
    best = max(f1_at.values())
    assert _f1_by_counting(labels, proba, trained.threshold) == pytest.approx(best)
    # On this data the choice matters: 0.5 and the worst cut-off both do clearly worse.
    assert _f1_by_counting(labels, proba, 0.5) < best - 0.1
    assert min(f1_at.values()) < best - 0.1


@pytest.mark.parametrize(
    ("labels", "probs", "expected"),
    [
        # F1 per cut-off: 0.1 -> 6/9, 0.3 -> 6/8, 0.35 -> 6/7, 0.4 -> 4/6, 0.8 -> 4/5, 0.9 -> 2/4.
        ([0, 0, 1, 0, 1, 1], [0.1, 0.3, 0.35, 0.4, 0.8, 0.9], 0.35),
        # Only the highest score is a fraud: the strictest cut-off is the one with F1 = 1.
        ([0, 0, 0, 1], [0.2, 0.6, 0.7, 0.95], 0.95),
        # F1 per cut-off: 0.05 -> 6/7, 0.1 -> 4/6, 0.2 -> 4/5, 0.3 -> 2/4: flagging everything wins.
        ([1, 0, 1, 1], [0.05, 0.1, 0.2, 0.3], 0.05),
        # The top score is legit (precision = recall = 0 there: F1 is 0, not 0/0); the best cut-off
        # has precision = recall = 0.5 (F1 0.5) and beats flagging everything (F1 1/3).
        ([0, 1, 0, 0, 0, 0, 0, 0, 0, 1], [0.95, 0.9, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5, 0.05], 0.9),
    ],
    ids=["middle", "strictest", "loosest", "top-score-legit"],
)
@pytest.mark.unit
def test_best_f1_threshold_on_hand_made_scores(labels: list[int], probs: list[float], expected: float) -> None:
    assert best_f1_threshold(np.array(labels), np.array(probs)) == pytest.approx(expected)


@pytest.mark.unit
def test_a_converted_models_threshold_lies_between_two_scores_with_the_same_decisions() -> None:
    """Tree scores are few values shared by many rows: the best cut-off 0.35 is one of them, and float32
    rounding of that score in the served graph would flip all its rows. Halfway to the next lower score
    (0.3) no row sits at the threshold, and every validation row is decided as at 0.35."""
    labels = np.array([0, 0, 0, 1, 1, 1, 0, 1, 1, 1])
    probs = np.array([0.1, 0.3, 0.3, 0.35, 0.35, 0.35, 0.4, 0.8, 0.9, 0.9])
    best = best_f1_threshold(labels, probs)
    threshold = between_scores_threshold(labels, probs)
    assert best == pytest.approx(0.35)
    assert threshold == pytest.approx(0.325)
    assert ((probs >= threshold) == (probs >= best)).all()
    assert np.float32(0.35) >= threshold  # the score as the graph answers it is still flagged
    # Scores the graph answers in float32: the midpoint is computed in float64, not rounded to float32.
    single = probs.astype(np.float32)
    assert between_scores_threshold(labels, single) == (float(np.float32(0.35)) + float(np.float32(0.3))) / 2
    # No lower score: the best cut-off flags everything, and stays.
    assert between_scores_threshold(np.array([1, 0, 1]), np.array([0.2, 0.5, 0.7])) == pytest.approx(0.2)


@pytest.mark.unit
def test_train_params_are_read_from_settings() -> None:
    settings = PipelineSettings(seed=5, max_epochs=7, patience=3, batch_size=64, learning_rate=3e-3, device="cpu")
    params = TrainParams.from_settings(settings)
    assert (params.seed, params.max_epochs, params.patience, params.batch_size, params.learning_rate) == (
        5, 7, 3, 64, 3e-3)


@pytest.mark.integration
def test_different_seeds_give_different_models(noisy: Splits, contract: DataContract) -> None:
    one_epoch = {"max_epochs": 1}
    first = train_model(noisy[0], noisy[1], contract, PARAMS.model_copy(update=one_epoch))
    other_seed = TrainParams.from_settings(SETTINGS.model_copy(update={"seed": 12, **one_epoch}))
    second = train_model(noisy[0], noisy[1], contract, other_seed)
    assert first.history[0].val_pr_auc != second.history[0].val_pr_auc
    assert not all(torch.equal(a, b) for a, b in zip(_mlp_weights(first.model), _mlp_weights(second.model),
                                                     strict=True))


@pytest.mark.integration
def test_configured_seed_draws_the_initial_weights(
    noisy: Splits, contract: DataContract, tmp_path: Path
) -> None:
    paths = {}
    for name, frame in zip(("train", "validation", "test"), noisy, strict=True):
        paths[name] = tmp_path / f"{name}.parquet"
        frame.to_parquet(paths[name], index=False)
    # A learning rate this small leaves the weights where the seed put them (Adam moves each by ~lr per step).
    settings = SETTINGS.model_copy(update={"seed": 2024, "max_epochs": 1, "learning_rate": 1e-9,
                                           "home": tmp_path / "home"})
    outcome = run_training(paths, tmp_path / "out", str(tmp_path / "checkpoints"), settings=settings)

    def initial(seed: int) -> list[torch.Tensor]:
        torch.manual_seed(seed)
        model = TabularMLP.for_contract(contract, fit_vocabularies(contract), settings.hidden_sizes, settings.dropout)
        return _mlp_weights(model)

    assert outcome.result is not None  # the platform's loop trained it (family mlp)
    trained = _mlp_weights(outcome.result.model)
    for got, want in zip(trained, initial(2024), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert not all(torch.allclose(got, want, atol=1e-3) for got, want in zip(trained, initial(42), strict=True))


def _evaluate(noisy: Splits, contract: DataContract, candidate: OnnxModel, production: OnnxModel,
              margin: float, out_dir: Path) -> EvaluationReport:
    return evaluate(noisy[2], contract, candidate, production, "1", margin, out_dir, train=noisy[0], gates=NO_GATES)


@pytest.mark.integration
def test_evaluate_scores_production_at_its_own_threshold(
    onnx_at: dict[str, OnnxModel], noisy: Splits, contract: DataContract, tmp_path: Path
) -> None:
    test = noisy[2]
    labels = test[contract.label_column].to_numpy()
    proba = onnx_at["best"].predict_proba(test)
    report = _evaluate(noisy, contract, onnx_at["half"], onnx_at["best"], 0.0, tmp_path)
    assert report.candidate.threshold == 0.5
    assert report.production is not None
    assert report.production.threshold == onnx_at["best"].threshold
    assert report.candidate.f1 == pytest.approx(_f1_by_counting(labels, proba, 0.5))
    assert report.production.f1 == pytest.approx(_f1_by_counting(labels, proba, onnx_at["best"].threshold))
    # Same scores, different cut-offs: only the thresholds separate the two F1s.
    assert report.production.f1 > report.candidate.f1 + 0.05
    assert report.decision == "reject"


@pytest.mark.integration
def test_evaluate_applies_the_margin_from_settings_to_the_gains_lower_bound(
    onnx_at: dict[str, OnnxModel], noisy: Splits, contract: DataContract, tmp_path: Path,
) -> None:
    test = noisy[2]
    labels = test[contract.label_column].to_numpy()
    proba = onnx_at["best"].predict_proba(test)
    gain = _f1_by_counting(labels, proba, onnx_at["best"].threshold) - _f1_by_counting(labels, proba, 0.5)
    assert gain > 0.05
    first = _evaluate(noisy, contract, onnx_at["best"], onnx_at["half"], 0.0, tmp_path)
    assert first.promotion is not None
    assert first.promotion.f1_gain == pytest.approx(gain)
    low = first.promotion.f1_gain_low
    assert low is not None
    assert low < gain
    assert first.decision == ("promote" if low >= 0 else "reject")
    # A margin just above the lower bound refuses even though the point gain clears it.
    margin = round(max(low, 0.0) + 0.01, 4)
    assert margin < gain
    settings = PipelineSettings(promotion_margin=margin)
    report = _evaluate(noisy, contract, onnx_at["best"], onnx_at["half"], settings.promotion_margin, tmp_path)
    assert report.margin == margin
    assert report.decision == "reject"
    assert f"lower bound below margin {margin}" in report.reason


@pytest.fixture
def home_with_margin(mlflow_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PipelineSettings]:
    monkeypatch.setenv("MLOPS_HOME", str(mlflow_home))
    monkeypatch.setenv("MLOPS_PROMOTION_MARGIN", "0.37")  # not the default 0.02
    yield PipelineSettings()
    mlflow.set_tracking_uri(None)  # type: ignore[arg-type]  # None = unset, the environment decides again
    mlflow.set_registry_uri(None)  # type: ignore[arg-type]


@pytest.mark.integration
def test_evaluate_task_takes_the_margin_from_settings(
    home_with_margin: PipelineSettings, onnx_at: dict[str, OnnxModel], noisy: Splits, tmp_path: Path
) -> None:
    settings = home_with_margin
    client = activate(settings).client  # log_model_to_mlflow is fluent
    experiment_id = registry.ensure_experiment(settings)
    uris = {}
    for name in ("half", "best"):
        run_id = client.create_run(experiment_id).info.run_id
        uris[name] = (run_id, log_model_to_mlflow(run_id, ExportResult(onnx_at[name].path, 0.0)))
    registry.promote(settings, registry.register_version(settings, uris["half"][1], uris["half"][0], tags={}))
    model_dir = tmp_path / "candidate"
    model_dir.mkdir()
    shutil.copyfile(onnx_at["best"].path, model_dir / registry.ONNX_FILE)
    splits = {}
    for name, frame in (("train", noisy[0]), ("test", noisy[2])):
        splits[name] = tmp_path / f"{name}.parquet"
        frame.to_parquet(splits[name], index=False)
    run_id, model_uri = uris["best"]

    evaluated = evaluate_task(StepContext.of(settings), train=splits["train"], test=splits["test"], model=model_dir,
                              exported=ExportRecord(run_id=run_id, model_uri=model_uri),
                              evaluation=tmp_path / "evaluation")

    report = EvaluationReport.model_validate_json((tmp_path / "evaluation" / "report.json").read_text())
    assert report.margin == 0.37
    assert report.production_version == "1"
    assert report.production is not None
    gain = report.candidate.f1 - report.production.f1
    assert 0.05 < gain < 0.37  # better than production, but not by the configured margin
    assert (evaluated.decision, evaluated.version) == ("reject", "2")
