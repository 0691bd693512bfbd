"""``mlops train --family a,b``: several families on the same splits, one nested MLflow run each under
one parent run, the best on validation PR-AUC exported, scored on the test split and registered.

Each family trains as ``MLOPS_MODEL_FAMILY=<family>`` would in the same environment
(:meth:`pipelines.settings.PipelineSettings.for_family`), through the train step's own code, so its
run is what ``mlops train`` alone would log; with ``--search N`` each family first searches its own
space, its trials nested under its run. The choice reads each run's ``best_val_pr_auc`` back from
MLflow: the number a person compares in the UI is the one that decided. A tie goes to the family named
first. Only the chosen family is exported (its parity checked) and registered: the others' ONNX graphs
would be built to be thrown away.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from mlflow.entities import Metric, Param
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from mlops import registry
from mlops.errors import ConfigError, TrainingError
from mlops.registry_client import activate
from pipelines.settings import PipelineSettings
from pipelines.training.command import TrainReport, export_and_score, new_run
from pipelines.training.entry import run_training
from pipelines.training.families.bundled import family_for
from pipelines.training.families.interface import family_class
from pipelines.training.search import check_space, search

log = logging.getLogger(__name__)
CHOSEN_BY = "best_val_pr_auc"


@dataclass(frozen=True)
class FamilyRun:
    family: str
    run_id: str
    val_pr_auc: float  # as MLflow holds it


@dataclass(frozen=True)
class Comparison:
    parent_run_id: str
    runs: list[FamilyRun]
    chosen: FamilyRun
    report: TrainReport  # the chosen family's export and test scores
    version: str  # the registered version


def parse_families(text: str) -> list[str]:
    """``"mlp, xgboost"`` -> ["mlp", "xgboost"]; an unknown, repeated or empty name is a ConfigError."""
    import pipelines.training.families.bundled  # noqa: F401  (registers the bundled families)

    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise ConfigError(f"--family {text!r}: name families separated by commas, e.g. mlp,xgboost", field="family")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"--family {text!r} names {', '.join(repeated)} more than once", field="family")
    for name in names:
        family_class(name)  # an unknown name: one line listing the registered ones
    return names


def compare_families(paths: dict[str, Path], families: list[str], out_dir: Path, checkpoint_dir: str,
                     settings: PipelineSettings, *, search_trials: int = 0) -> Comparison:
    """Train each of ``families`` in its nested run, export, score and register the best."""
    if len(families) < 2:
        raise ConfigError("a comparison needs two families or more", field="family")
    chosen_settings = {family: settings.for_family(family) for family in families}
    for family_settings in chosen_settings.values():
        family_for(family_settings).params  # noqa: B018  (a family refusing its settings stops before any training)
        if search_trials:
            check_space(family_settings)  # a family without a space too
    activate(settings)
    client = registry.client(settings)
    parent = new_run(settings, {"entry": "mlops train --family", "families": ",".join(families)},
                     run_name=f"train {' vs '.join(families)}")
    open_runs = [parent]
    try:
        runs = []
        for family, family_settings in chosen_settings.items():
            run_id = new_run(family_settings, {MLFLOW_PARENT_RUN_ID: parent, "entry": "mlops train --family"},
                             run_name=f"train {family}")
            open_runs.append(run_id)
            params = None
            if search_trials:
                tuned = search(paths, search_trials, family_settings, run_id)
                family_settings, params = tuned.settings, tuned.params
                chosen_settings[family] = family_settings
            # Each family's own checkpoint folder (by its training fingerprint): a rerun resumes it.
            run_training(paths, out_dir / family, checkpoint_dir, run_id=run_id, params=params,
                         settings=family_settings)
            logged = client.get_run(run_id).data.metrics.get(CHOSEN_BY)
            if logged is None:
                raise TrainingError(f"the {family} run {run_id} logged no {CHOSEN_BY}")
            runs.append(FamilyRun(family, run_id, float(logged)))
            client.set_terminated(run_id)  # trained: the chosen one's export and test scores join it later
            open_runs.remove(run_id)
            log.info("%s: validation PR-AUC %.4f (run %s)", family, logged, run_id)
        chosen = max(runs, key=lambda run: run.val_pr_auc)  # max keeps the first of equals: the order given
        report = export_and_score(paths, out_dir / chosen.family, chosen_settings[chosen.family], chosen.run_id)
        version = registry.register_version(settings, report.model_uri, chosen.run_id, {
            "model_family": chosen.family, "chosen_by": f"{CHOSEN_BY} of {', '.join(families)}",
            "comparison_run_id": parent})
        now_ms = int(time.time() * 1000)
        client.log_batch(parent, metrics=[Metric(f"{CHOSEN_BY}/{run.family}", run.val_pr_auc, now_ms, 0)
                                          for run in runs],
                         params=[Param("families", ",".join(families)), Param("chosen_family", chosen.family),
                                 Param("chosen_run_id", chosen.run_id), Param("chosen_by", CHOSEN_BY),
                                 Param("registered_version", version)])
        client.set_tag(parent, "model_family", chosen.family)
        client.set_terminated(parent)
    except BaseException:
        for run_id in open_runs:  # what was under way failed; a family that finished training stays so
            client.set_terminated(run_id, "FAILED")
        raise
    return Comparison(parent_run_id=parent, runs=runs, chosen=chosen, report=report, version=version)
