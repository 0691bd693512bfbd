"""``mlops train --search N``: N Optuna trials on the same splits, each a nested MLflow run.

Optuna, not Ray Tune: trials here are seconds-long single-process fits on in-memory tensors, so a
cluster scheduler buys nothing; Optuna is one light pure-Python dependency, its TPE sampler is
seeded (the search itself is reproducible), and each trial maps onto one nested MLflow run with
plain MLflow calls. The best configuration goes on to the normal train step.
"""

from __future__ import annotations

import logging
from pathlib import Path

import mlflow

from mlops.contract import load_contract
from mlops.errors import ConfigError
from mlops.model import fit_vocabularies
from pipelines.settings import PipelineSettings
from pipelines.training.data import read_split
from pipelines.training.families.bundled import MLPFamily, family_for
from pipelines.training.tracking import params_to_log
from pipelines.training.trainer import TrainParams, train_model

log = logging.getLogger(__name__)

# Layer-width choices as strings: Optuna's categorical values must be plain scalars.
_ARCHITECTURES = {"64-32": (64, 32), "128-64": (128, 64), "128-64-32": (128, 64, 32), "32": (32,)}


def _suggest(trial: object, base: TrainParams) -> TrainParams:
    import optuna

    assert isinstance(trial, optuna.Trial)
    return base.model_copy(update={
        "learning_rate": trial.suggest_float("learning_rate", 3e-4, 1e-2, log=True),
        "hidden_sizes": _ARCHITECTURES[trial.suggest_categorical("hidden_sizes", list(_ARCHITECTURES))],
        "dropout": trial.suggest_float("dropout", 0.0, 0.3),
        "weight_decay": trial.suggest_float("weight_decay", 1e-6, 1e-3, log=True),
        "batch_size": trial.suggest_categorical("batch_size", [256, 512, 1024]),
    })


def search(paths: dict[str, Path], trials: int, settings: PipelineSettings, parent_run_id: str) -> TrainParams:
    """Run ``trials`` trials maximising validation PR-AUC; returns the best trial's settings."""
    import optuna

    if family_for(settings).name != MLPFamily.name:
        raise ConfigError(f"--search tunes the mlp family's settings; the {settings.model_family} family has no "
                          "search space yet: set its parameters in MLOPS_MODEL_PARAMS", field="model_family")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    contract = load_contract(settings.contract_path)
    base = TrainParams.from_settings(settings)
    # Read and encoded once for all trials: only the model's inputs and the label.
    vocabs = fit_vocabularies(contract)
    train, val = (read_split(paths[name], contract, vocabs, name) for name in ("train", "validation"))
    tried: dict[int, TrainParams] = {}
    experiment_id = mlflow.MlflowClient().get_run(parent_run_id).info.experiment_id

    def objective(trial: optuna.Trial) -> float:
        params = _suggest(trial, base)
        tried[trial.number] = params
        with mlflow.start_run(run_name=f"trial-{trial.number}", experiment_id=experiment_id, nested=True,
                              parent_run_id=parent_run_id):
            result = train_model(train, val, contract, params)
            mlflow.log_params(params_to_log(params))
            mlflow.log_metrics({"best_val_pr_auc": result.best.val_pr_auc, "best_epoch": result.best_epoch})
        log.info("trial %d: val PR-AUC %.4f", trial.number, result.best.val_pr_auc)
        return result.best.val_pr_auc

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=settings.seed))
    study.optimize(objective, n_trials=trials)
    best = tried[study.best_trial.number]
    mlflow.MlflowClient().log_batch(parent_run_id, params=[
        mlflow.entities.Param("search_trials", str(trials)),
        mlflow.entities.Param("search_best_trial", str(study.best_trial.number)),
    ])
    log.info("best of %d trials: #%d (val PR-AUC %.4f)", trials, study.best_trial.number, study.best_value)
    return best
