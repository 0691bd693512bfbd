"""``mlops train --family a,b``: the families train on the same splits as nested runs of one parent run,
and the version registered is the family whose run MLflow holds the higher validation PR-AUC for, whichever
family that is; ``--search N`` searches each family's own space. Against a real MLflow store (SQLite)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from mlflow.entities import Run
from mlflow.tracking import MlflowClient
from threadpoolctl import threadpool_limits
from typer.testing import CliRunner

from mlops import registry
from mlops.contracts import BUNDLED_CONTRACT
from mlops.errors import ConfigError
from mlops_cli.app import app
from pipelines.settings import PipelineSettings
from pipelines.training.search import check_space

runner = CliRunner()
ENV = {"MLOPS_MAX_EPOCHS": "3", "MLOPS_PATIENCE": "3", "MLOPS_DEVICE": "cpu", "MLOPS_SEED": "3",
       "MLOPS_BATCH_SIZE": "256"}


@pytest.fixture(scope="module")
def home(home: Path) -> Iterator[Path]:
    """The module's MLflow home, small training settings, no model choice from this shell, one thread."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in ENV.items():
            patch.setenv(key, value)
        for name in ("MLOPS_MODEL_FAMILY", "MLOPS_MODEL_PARAMS", "MLOPS_CALIBRATION", "MLOPS_CONTRACT_PATH",
                     "MLOPS_PARAMS_FILE", "MLOPS_SETTINGS_JSON", "MLOPS_PROFILE"):
            patch.delenv(name, raising=False)
        with threadpool_limits(limits=1):
            yield home


def client(home: Path) -> MlflowClient:
    return registry.client(PipelineSettings(home=home))


def children(home: Path, parent: str) -> list[Run]:
    mlflow_client = client(home)
    experiment_id = mlflow_client.get_run(parent).info.experiment_id
    return mlflow_client.search_runs([experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent}'")


def compare(home: Path, data_dir: Path, families: str, out: str, *extra: str) -> tuple[Run, str]:
    """Run the command; its parent run (the newest comparison) and its output."""
    result = runner.invoke(app, ["train", "--family", families, "--data-dir", str(data_dir),
                                 "--out-dir", str(home / out), *extra])
    assert result.exit_code == 0, result.output
    mlflow_client = client(home)
    experiment_id = registry.ensure_experiment(PipelineSettings(home=home))
    parents = mlflow_client.search_runs([experiment_id], filter_string="tags.entry = 'mlops train --family' and "
                                        f"params.families = '{families}'", order_by=["attributes.start_time DESC"])
    assert parents, result.output
    return parents[0], result.output


def contract_crippling_xgboost(folder: Path) -> Path:
    """The bundled contract whose model section gives xgboost one shallow tree (its params go to it alone)."""
    raw = yaml.safe_load(BUNDLED_CONTRACT.read_text())
    raw["model"] = {"family": "xgboost", "params": {"n_estimators": 1, "max_depth": 1, "learning_rate": 0.01}}
    path = folder / "crippled.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.mark.parametrize(("handicap", "winner"), [
    ("xgboost", "mlp"),  # one stump for xgboost (the contract's section) against three MLP epochs
    ("mlp", "xgboost"),  # an MLP that barely moves (1 epoch at a learning rate of 1e-6) against 60 trees
])
@pytest.mark.integration
def test_the_family_with_the_higher_validation_pr_auc_in_mlflow_is_registered(
        home: Path, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handicap: str,
        winner: str) -> None:
    if handicap == "xgboost":
        monkeypatch.setenv("MLOPS_CONTRACT_PATH", str(contract_crippling_xgboost(tmp_path)))
    else:
        monkeypatch.setenv("MLOPS_MAX_EPOCHS", "1")
        monkeypatch.setenv("MLOPS_LEARNING_RATE", "1e-6")
        monkeypatch.setenv("MLOPS_MODEL_PARAMS", '{"n_estimators": 60}')  # every family's; the MLP ignores it
    parent, output = compare(home, data_dir, "mlp,xgboost", f"compare-{handicap}")

    runs = {run.data.params["model_family"]: run for run in children(home, parent.info.run_id)}
    assert set(runs) == {"mlp", "xgboost"}
    pr_auc = {family: run.data.metrics["best_val_pr_auc"] for family, run in runs.items()}
    best = max(pr_auc, key=pr_auc.__getitem__)
    assert best == winner, pr_auc  # the handicap decided, so the choice follows the data, not the order
    # The same splits for both: each nested run logged the hashes of the files it read.
    assert {run.data.params["train_sha256"] for run in runs.values()} == {runs["mlp"].data.params["train_sha256"]}
    assert {run.data.params["validation_sha256"] for run in runs.values()} == \
        {runs["mlp"].data.params["validation_sha256"]}

    mlflow_client = client(home)
    settings = PipelineSettings(home=home)
    version = parent.data.params["registered_version"]
    registered = mlflow_client.get_model_version(settings.model_name, version)
    assert registered.run_id == runs[best].info.run_id
    assert registered.tags["model_family"] == best
    assert parent.data.params["chosen_family"] == best
    assert parent.data.metrics[f"best_val_pr_auc/{best}"] == pr_auc[best]
    assert "test_pr_auc" in runs[best].data.metrics  # only the chosen family is exported and scored
    other = next(family for family in runs if family != best)
    assert "test_pr_auc" not in runs[other].data.metrics
    # The table: each family with the PR-AUC MLflow holds, the chosen one marked.
    rows = {line.split()[1]: line for line in output.splitlines() if line.startswith("│") and "PR-AUC" not in line}
    assert f"{pr_auc[best]:.4f}" in rows[best]
    assert "yes" in rows[best]
    assert f"{pr_auc[other]:.4f}" in rows[other]
    assert "yes" not in rows[other]
    assert f"registered {settings.model_name} version {version}: {best}" in " ".join(output.split())


@pytest.mark.integration
def test_search_tunes_each_family_in_its_own_space_under_its_own_run(
        home: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_MAX_EPOCHS", "2")
    monkeypatch.setenv("MLOPS_MODEL_PARAMS", '{"n_estimators": 40}')  # held: xgboost's search leaves it
    parent, _ = compare(home, data_dir, "xgboost,mlp", "searched", "--search", "2")
    runs = {run.data.params["model_family"]: run for run in children(home, parent.info.run_id)}
    assert set(runs) == {"mlp", "xgboost"}

    xgboost_trials = children(home, runs["xgboost"].info.run_id)
    assert len(xgboost_trials) == 2
    tried = [json.loads(trial.data.params["model_params"]) for trial in xgboost_trials]
    assert all(params["n_estimators"] == 40 for params in tried)  # the data scientist's value, not searched
    assert tried[0]["max_depth"] != tried[1]["max_depth"] or tried[0]["learning_rate"] != tried[1]["learning_rate"]
    best = max(xgboost_trials, key=lambda trial: trial.data.metrics["best_val_pr_auc"])
    assert runs["xgboost"].data.params["model_params"] == best.data.params["model_params"]  # trained with the best

    mlp_trials = children(home, runs["mlp"].info.run_id)
    assert len(mlp_trials) == 2
    assert all("train.hidden_sizes" in trial.data.params for trial in mlp_trials)  # the MLP's space, unchanged
    best_mlp = max(mlp_trials, key=lambda trial: trial.data.metrics["best_val_pr_auc"])
    assert runs["mlp"].data.params["train.hidden_sizes"] == best_mlp.data.params["train.hidden_sizes"]
    assert parent.data.params["chosen_family"] == max(
        runs, key=lambda family: runs[family].data.metrics["best_val_pr_auc"])


@pytest.mark.parametrize(("family", "params", "searched"), [
    ("sklearn", {"estimator": "sklearn.ensemble.RandomForestClassifier", "n_estimators": 20, "n_jobs": 1},
     "max_depth"),
    ("sklearn", {"max_iter": 20}, "learning_rate"),  # HistGradientBoosting, the default estimator
])
@pytest.mark.integration
def test_search_of_one_family_tunes_the_params_of_its_space(
        home: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch, family: str, params: dict[str, Any],
        searched: str) -> None:
    monkeypatch.setenv("MLOPS_MODEL_PARAMS", json.dumps(params))
    result = runner.invoke(app, ["train", "--family", family, "--search", "2", "--data-dir", str(data_dir),
                                 "--out-dir", str(home / f"one-{searched}")])
    assert result.exit_code == 0, result.output
    run_id = result.output.split("run ")[1].split(":")[0]
    trials = children(home, run_id)
    assert len(trials) == 2
    values = [json.loads(trial.data.params["model_params"]) for trial in trials]
    assert values[0][searched] != values[1][searched]
    assert all(value[name] == params[name] for value in values for name in params)  # held
    trained = json.loads(client(home).get_run(run_id).data.params["model_params"])
    best = max(trials, key=lambda trial: trial.data.metrics["best_val_pr_auc"])
    assert trained == json.loads(best.data.params["model_params"])


@pytest.mark.unit
def test_a_family_without_a_search_space_stops_before_anything_trains(home: Path, data_dir: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"--search has no space for the sklearn estimator 'own_estimators.scaled"):
        check_space(PipelineSettings(model_family="sklearn",
                                     model_params={"estimator": "own_estimators:scaled_logistic"}))
    monkeypatch.setenv("MLOPS_MODEL_PARAMS", '{"estimator": "own_estimators:scaled_logistic"}')
    before = len(client(home).search_runs([registry.ensure_experiment(PipelineSettings(home=home))]))
    result = runner.invoke(app, ["train", "--family", "xgboost,sklearn", "--search", "2", "--data-dir",
                                 str(data_dir), "--out-dir", str(home / "no-space")])
    assert result.exit_code == 2, result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1
    assert "--search has no space for the sklearn estimator" in result.output
    assert len(client(home).search_runs([registry.ensure_experiment(PipelineSettings(home=home))])) == before


@pytest.mark.parametrize(("args", "message"), [
    (["--family", "mlp,lightgbm"], "unknown model family 'lightgbm'; registered: mlp, sklearn, torch, xgboost"),
    (["--family", "mlp,mlp"], "--family 'mlp,mlp' names mlp more than once"),
    (["--family", "mlp,"], "name families separated by commas"),
    (["--family", "mlp,xgboost", "--run-id", "abc"], "--family a,b opens its own runs"),
    (["--family", "xgboost", "--reproduce", "abc"], "--reproduce takes no"),
])
@pytest.mark.unit
def test_a_bad_family_option_is_one_line_and_exit_2(home: Path, data_dir: Path, args: list[str],
                                                     message: str) -> None:
    data = [] if "--reproduce" in args else ["--data-dir", str(data_dir)]
    result = runner.invoke(app, ["train", *args, *data])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


@pytest.mark.unit
def test_each_family_trains_as_its_setting_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--family f is MLOPS_MODEL_FAMILY=f: a setting's params and calibration go with it, the contract
    section's params only to the section's family."""
    raw = yaml.safe_load(BUNDLED_CONTRACT.read_text())
    raw["model"] = {"family": "xgboost", "params": {"max_depth": 3}, "calibration": "isotonic"}
    path = tmp_path / "contract.yaml"
    path.write_text(yaml.safe_dump(raw))
    for name in ("MLOPS_MODEL_FAMILY", "MLOPS_MODEL_PARAMS", "MLOPS_CALIBRATION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLOPS_CONTRACT_PATH", str(path))
    settings = PipelineSettings()
    mlp = settings.for_family("mlp")
    assert (mlp.model_family, mlp.model_params, mlp.calibration) == ("mlp", {}, "auto")
    assert mlp.for_family("xgboost").model_params == {"max_depth": 3}
    monkeypatch.setenv("MLOPS_MODEL_FAMILY", "mlp")
    monkeypatch.setenv("MLOPS_CALIBRATION", "platt")
    xgboost = PipelineSettings().for_family("xgboost")
    assert (xgboost.model_params, xgboost.calibration) == ({"max_depth": 3}, "platt")
    monkeypatch.setenv("MLOPS_MODEL_PARAMS", '{"max_depth": 5}')
    assert PipelineSettings().for_family("sklearn").model_params == {"max_depth": 5}


@pytest.mark.integration
def test_search_of_a_users_torch_module_tunes_the_loops_settings_and_keeps_its_params(
        home: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_MAX_EPOCHS", "2")
    monkeypatch.setenv("MLOPS_MODEL_PARAMS", '{"module": "user_nets:Wide", "hidden": 8}')
    result = runner.invoke(app, ["train", "--family", "torch", "--search", "2", "--data-dir", str(data_dir),
                                 "--out-dir", str(home / "torch-searched")])
    assert result.exit_code == 0, result.output
    run_id = result.output.split("run ")[1].split(":")[0]
    trials = children(home, run_id)
    assert len(trials) == 2
    assert {trial.data.params["model_params"] for trial in trials} == {'{"hidden": 8, "module": "user_nets:Wide"}'}
    rates = {trial.data.params["train.learning_rate"] for trial in trials}
    assert len(rates) == 2
    best = max(trials, key=lambda trial: trial.data.metrics["best_val_pr_auc"])
    assert client(home).get_run(run_id).data.params["train.learning_rate"] == best.data.params["train.learning_rate"]


@pytest.mark.unit
def test_a_family_refusing_its_settings_stops_the_comparison_before_anything_trains(
        home: Path, data_dir: Path) -> None:
    experiment_id = registry.ensure_experiment(PipelineSettings(home=home))
    before = len(client(home).search_runs([experiment_id]))
    result = runner.invoke(app, ["train", "--family", "xgboost,torch", "--data-dir", str(data_dir),
                                 "--out-dir", str(home / "no-module")])
    assert result.exit_code == 2, result.output
    assert "the torch family needs its module" in " ".join(result.output.split())
    assert len(client(home).search_runs([experiment_id])) == before


@pytest.mark.unit
def test_a_family_failing_mid_comparison_fails_the_parent_and_registers_nothing(
        home: Path, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = yaml.safe_load(BUNDLED_CONTRACT.read_text())
    raw["model"] = {"family": "sklearn", "params": {"estimator": "sklearn.linear_model.LogisticRegression", "C": -1.0}}
    path = tmp_path / "bad-c.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    monkeypatch.setenv("MLOPS_CONTRACT_PATH", str(path))
    settings = PipelineSettings(home=home)
    versions = len(client(home).search_model_versions(f"name = '{settings.model_name}'"))
    result = runner.invoke(app, ["train", "--family", "xgboost,sklearn", "--data-dir", str(data_dir),
                                 "--out-dir", str(home / "mid-failure")])
    assert result.exit_code == 2, result.output
    assert "LogisticRegression did not fit: The 'C' parameter" in " ".join(result.output.split())
    experiment_id = registry.ensure_experiment(settings)
    parent = client(home).search_runs([experiment_id], filter_string="tags.families = 'xgboost,sklearn'")
    assert len(parent) == 1
    assert parent[0].info.status == "FAILED"
    status = {run.info.run_name: run.info.status for run in children(home, parent[0].info.run_id)}
    assert status == {"train xgboost": "FINISHED", "train sklearn": "FAILED"}
    assert len(client(home).search_model_versions(f"name = '{settings.model_name}'")) == versions
