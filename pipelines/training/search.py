"""``mlops train --search N``: N Optuna trials on the same splits, each a nested MLflow run, in the
space of the family that trains.

Optuna, not Ray Tune: trials here are seconds-long single-process fits on in-memory tensors, so a
cluster scheduler buys nothing; Optuna is one light pure-Python dependency, its TPE sampler is
seeded (the search itself is reproducible), and each trial maps onto one nested MLflow run with
plain MLflow calls. The best configuration goes on to the normal train step.

Each family searches its own space (:data:`SPACES`): the MLP its settings (layer widths, learning rate,
dropout, weight decay, batch size); ``torch`` the loop's settings around a user's module (learning rate,
weight decay, batch size: the module's own params are the user's); ``xgboost`` the usual boosting knobs;
``sklearn`` the estimators it knows a space for. In the families' params spaces a key the data scientist
set in ``model_params`` is held at their value and not searched.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow

from mlops.contract import load_contract
from mlops.errors import ConfigError
from mlops.model import fit_vocabularies
from mlops.registry_client import activate
from pipelines.settings import PipelineSettings
from pipelines.training.data import read_split
from pipelines.training.families.bundled import MLPFamily, family_for
from pipelines.training.family_training import FAMILY_PARAMS_PREFIX, read_frame
from pipelines.training.tracking import params_to_log
from pipelines.training.trainer import TrainParams, train_model

if TYPE_CHECKING:
    import optuna

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


# A family's space: one trial's settings (its params, or the loop's settings) from the family's settings.
Space = Callable[["optuna.Trial", PipelineSettings], PipelineSettings]


# A params space: each name's draw from a trial.
Draws = dict[str, Callable[["optuna.Trial"], Any]]


def _params(trial: optuna.Trial, settings: PipelineSettings, space: Draws) -> PipelineSettings:
    """The family's settings with the drawn params; a key the data scientist set is held at their value
    and not drawn."""
    fixed = settings.model_params
    drawn = {name: draw(trial) for name, draw in space.items() if name not in fixed}
    return settings.model_copy(update={"model_params": {**fixed, **drawn}})


# n_estimators is the ceiling early stopping (on validation PR-AUC) stops under.
_XGBOOST: Draws = {
    "max_depth": lambda t: t.suggest_int("max_depth", 2, 10),
    "learning_rate": lambda t: t.suggest_float("learning_rate", 0.01, 0.3, log=True),
    "n_estimators": lambda t: t.suggest_int("n_estimators", 100, 1000, step=100),
    "min_child_weight": lambda t: t.suggest_float("min_child_weight", 0.5, 20.0, log=True),
    "subsample": lambda t: t.suggest_float("subsample", 0.6, 1.0),
    "colsample_bytree": lambda t: t.suggest_float("colsample_bytree", 0.6, 1.0),
    "reg_lambda": lambda t: t.suggest_float("reg_lambda", 1e-3, 10.0, log=True),
}

# scikit-learn: a space per estimator the platform knows; another estimator's params are the user's to set.
_SKLEARN_SPACES: dict[str, Draws] = {
    "sklearn.ensemble.HistGradientBoostingClassifier": {
        "learning_rate": lambda t: t.suggest_float("learning_rate", 0.02, 0.3, log=True),
        "max_iter": lambda t: t.suggest_int("max_iter", 50, 500, step=50),
        "max_leaf_nodes": lambda t: t.suggest_int("max_leaf_nodes", 8, 64, log=True),
        "min_samples_leaf": lambda t: t.suggest_int("min_samples_leaf", 5, 100, log=True),
        "l2_regularization": lambda t: t.suggest_float("l2_regularization", 1e-4, 10.0, log=True),
    },
    "sklearn.ensemble.RandomForestClassifier": {
        "n_estimators": lambda t: t.suggest_int("n_estimators", 100, 500, step=100),
        "max_depth": lambda t: t.suggest_int("max_depth", 3, 20),
        "min_samples_leaf": lambda t: t.suggest_int("min_samples_leaf", 1, 20, log=True),
        "max_features": lambda t: t.suggest_categorical("max_features", ["sqrt", "log2", 0.5]),
    },
    "sklearn.linear_model.LogisticRegression": {
        "C": lambda t: t.suggest_float("C", 1e-3, 1e2, log=True),
    },
}


def _xgboost(trial: optuna.Trial, settings: PipelineSettings) -> PipelineSettings:
    return _params(trial, settings, _XGBOOST)


def _sklearn_space(settings: PipelineSettings) -> Draws:
    from pipelines.training.families.sk import DEFAULT_ESTIMATOR

    estimator = str(settings.model_params.get("estimator", DEFAULT_ESTIMATOR)).replace(":", ".")
    space = _SKLEARN_SPACES.get(estimator)
    if space is None:
        raise ConfigError(f"--search has no space for the sklearn estimator {estimator!r} (it knows "
                          f"{', '.join(sorted(_SKLEARN_SPACES))}): set its params in MLOPS_MODEL_PARAMS",
                          field="model_params")
    return space


def _sklearn(trial: optuna.Trial, settings: PipelineSettings) -> PipelineSettings:
    return _params(trial, settings, _sklearn_space(settings))


def _torch(trial: optuna.Trial, settings: PipelineSettings) -> PipelineSettings:
    """The loop's settings around the user's module; the module's own params stay the user's."""
    return settings.model_copy(update={
        "learning_rate": trial.suggest_float("learning_rate", 3e-4, 1e-2, log=True),
        "weight_decay": trial.suggest_float("weight_decay", 1e-6, 1e-3, log=True),
        "batch_size": trial.suggest_categorical("batch_size", [256, 512, 1024]),
    })


SPACES: dict[str, Space] = {"xgboost": _xgboost, "sklearn": _sklearn, "torch": _torch}


def check_space(settings: PipelineSettings) -> None:
    """Raise ConfigError, before anything trains, where the family has no space to search."""
    name = family_for(settings).name
    if name == MLPFamily.name:
        return
    if name not in SPACES:
        raise ConfigError(f"--search has no space for the {name} family: set its params in MLOPS_MODEL_PARAMS",
                          field="model_family")
    if name == "sklearn":
        _sklearn_space(settings)


@dataclass(frozen=True)
class Tuned:
    """The best trial: the settings to train with, and for the MLP the loop's params it searched."""

    settings: PipelineSettings
    params: TrainParams | None
    trial: int
    val_pr_auc: float


def search(paths: dict[str, Path], trials: int, settings: PipelineSettings, parent_run_id: str) -> Tuned:
    """Run ``trials`` trials in the family's space maximising validation PR-AUC, nested under
    ``parent_run_id``; returns the best trial's settings."""
    check_space(settings)
    activate(settings)  # the trials log through MLflow's fluent API
    if family_for(settings).name == MLPFamily.name:
        params, trial, value = search_mlp(paths, trials, settings, parent_run_id)
        return Tuned(settings, params, trial, value)
    return _search_family(paths, trials, settings, parent_run_id)


def _search_family(paths: dict[str, Path], trials: int, settings: PipelineSettings, parent_run_id: str) -> Tuned:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    contract = load_contract(settings.contract_path)
    train, validation = (read_frame(paths[name], contract, name) for name in ("train", "validation"))
    space = SPACES[settings.model_family]
    tried: dict[int, PipelineSettings] = {}
    experiment_id = mlflow.MlflowClient().get_run(parent_run_id).info.experiment_id

    def objective(trial: optuna.Trial) -> float:
        chosen = space(trial, settings)
        tried[trial.number] = chosen
        family = family_for(chosen)
        with mlflow.start_run(run_name=f"trial-{trial.number}", experiment_id=experiment_id, nested=True,
                              parent_run_id=parent_run_id):
            _, summary = family.fit(train, validation, contract)
            logged = {"model_family": family.name, "model_params": json.dumps(family.params, sort_keys=True),
                      **{f"{FAMILY_PARAMS_PREFIX}{k}": json.dumps(v) for k, v in family.params.items()}}
            if family.platform_loop:
                logged.update(params_to_log(TrainParams.from_settings(chosen)))
            mlflow.log_params(logged)
            mlflow.log_metrics({"best_val_pr_auc": summary.val_pr_auc, "best_epoch": float(summary.best_round)})
        log.info("trial %d (%s): val PR-AUC %.4f", trial.number, family.name, summary.val_pr_auc)
        return summary.val_pr_auc

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=settings.seed))
    study.optimize(objective, n_trials=trials)
    _log_best(parent_run_id, trials, study)
    return Tuned(tried[study.best_trial.number], None, study.best_trial.number, study.best_value)


def _log_best(parent_run_id: str, trials: int, study: optuna.Study) -> None:
    mlflow.MlflowClient().log_batch(parent_run_id, params=[
        mlflow.entities.Param("search_trials", str(trials)),
        mlflow.entities.Param("search_best_trial", str(study.best_trial.number)),
    ])
    log.info("best of %d trials: #%d (val PR-AUC %.4f)", trials, study.best_trial.number, study.best_value)


def search_mlp(paths: dict[str, Path], trials: int, settings: PipelineSettings,
               parent_run_id: str) -> tuple[TrainParams, int, float]:
    """The MLP's search: ``trials`` trials of its settings; the best trial's params, number and PR-AUC."""
    import optuna

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
    _log_best(parent_run_id, trials, study)
    return tried[study.best_trial.number], study.best_trial.number, study.best_value
