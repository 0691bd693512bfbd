"""The deploy step rolls an accepted version out as the settings say, on a real local MLflow store: the
first version straight to production, a later one onto staging and a canary at MLOPS_CANARY_PERCENT
(production unchanged) unless MLOPS_ROLLOUT=direct; its audit record says why evaluate promoted the
version, word for word: a first promotion that there was no model in production, a later one by how
much it beat production."""

from __future__ import annotations

import mlflow
import mlflow.onnx
import pytest
from mlflow_tags import delete_every_tag
from onnx import TensorProto, helper

from mlops import registry
from mlops.errors import PromotionConflictError
from mlops.registry_client import activate
from pipelines.orchestration.context import StepContext
from pipelines.orchestration.records import DeployRecord, EvaluateRecord
from pipelines.orchestration.tasks import deploy_task
from pipelines.settings import PipelineSettings

pytestmark = pytest.mark.integration


def _registered(settings: PipelineSettings) -> tuple[str, str]:
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["probability"])], "identity",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch"])],
                              [helper.make_tensor_value_info("probability", TensorProto.FLOAT, ["batch"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    experiment_id = registry.ensure_experiment(settings)
    activate(settings)  # log_model is fluent
    with mlflow.start_run(experiment_id=experiment_id) as run:
        info = mlflow.onnx.log_model(model, name="model", pip_requirements=["onnxruntime"])
    version = registry.register_version(settings, info.model_uri, run.info.run_id, {"decision": "promote"})
    return run.info.run_id, version


def _deployed(settings: PipelineSettings, production_at_evaluation: str | None, reason: str = "better") -> DeployRecord:
    run_id, version = _registered(settings)
    return deploy_task(StepContext.of(settings), evaluated=EvaluateRecord(
        run_id=run_id, version=version, decision="promote", reason=reason,
        production_version_at_evaluation=production_at_evaluation))


def test_the_first_version_goes_to_production_with_no_canary(settings: PipelineSettings) -> None:
    assert settings.rollout == "canary"  # the default
    first = _deployed(settings, None)
    assert (first.rollout, first.production_version) == ("first", first.version)
    assert "no production model for a canary" in first.line
    assert registry.canary(settings) is None


def test_an_accepted_candidate_lands_on_staging_and_a_canary_and_production_stays(settings: PipelineSettings) -> None:
    v1 = _deployed(settings, None).version
    second = _deployed(settings, v1)
    assert registry.alias_version(settings) == v1  # production did not move
    assert registry.aliases(settings)[registry.STAGING_ALIAS] == second.version
    assert registry.canary(settings) == (second.version, 10.0)
    assert (second.rollout, second.canary_percent, second.production_version) == ("canary", 10.0, v1)
    assert "next: mlops model canary status" in second.line
    stage = registry.client(settings).get_model_version(settings.model_name, second.version).current_stage
    assert stage == "Staging"


def test_the_canary_share_is_the_setting(settings: PipelineSettings) -> None:
    settings = settings.model_copy(update={"canary_percent": 25.0})
    v1 = _deployed(settings, None).version
    second = _deployed(settings, v1)
    assert registry.canary(settings) == (second.version, 25.0)
    assert "canary at 25 % of the traffic" in second.line


def test_a_canary_is_not_started_against_a_champion_that_moved(settings: PipelineSettings) -> None:
    v1 = _deployed(settings, None).version
    v2 = _deployed(settings.model_copy(update={"rollout": "direct"}), v1).version
    with pytest.raises(PromotionConflictError, match="expected 1, now 2"):
        _deployed(settings, v1)  # evaluated against v1, but v2 holds production now
    assert registry.canary(settings) is None
    assert registry.alias_version(settings) == v2


def test_deploy_compares_with_evaluates_record_whatever_the_versions_tags_say(settings: PipelineSettings) -> None:
    v1 = _deployed(settings, None).version
    run_id, v2 = _registered(settings)
    # Tags are for people: edited to say there was no production model, they change nothing.
    registry.tag_version(settings, v2, {"production_version_at_evaluation": "none"})
    record = deploy_task(StepContext.of(settings), evaluated=EvaluateRecord(
        run_id=run_id, version=v2, decision="promote", reason="better", production_version_at_evaluation=v1))
    assert (record.rollout, record.production_version) == ("canary", v1)
    assert registry.aliases(settings)[registry.CANARY_ALIAS] == v2
    delete_every_tag(settings)  # the canary's share is recorded with v2's run, not in the model's tags
    assert registry.canary(settings) == (v2, 10.0)


def test_direct_rollout_moves_production(settings: PipelineSettings) -> None:
    settings = settings.model_copy(update={"rollout": "direct"})
    v1 = _deployed(settings, None).version
    second = _deployed(settings, v1)
    assert (second.rollout, second.production_version) == ("direct", second.version)
    assert registry.alias_version(settings) == second.version
    assert registry.canary(settings) is None


def test_the_audit_reason_is_the_evaluate_decisions_reason(settings: PipelineSettings) -> None:
    settings = settings.model_copy(update={"rollout": "direct"})  # the second version moves production
    context = StepContext.of(settings)
    first_reason = "no model in production yet; PR-AUC 0.8123 above the floor 0.5"
    run_id, v1 = _registered(settings)
    deploy_task(context, evaluated=EvaluateRecord(run_id=run_id, version=v1, decision="promote", reason=first_reason,
                                                  production_version_at_evaluation=None))
    second_reason = "PR-AUC 0.8400 vs production 0.8123: better by 0.0277, beyond the margin 0.02"
    run_id, v2 = _registered(settings)
    deploy_task(context, evaluated=EvaluateRecord(run_id=run_id, version=v2, decision="promote", reason=second_reason,
                                                  production_version_at_evaluation=v1))

    moves = [(c.from_version, c.to_version, c.reason) for c in registry.history(settings, settings.serving_alias)]
    assert moves == [(None, v1, first_reason), (v1, v2, second_reason)]
    description = registry.client(settings).get_registered_model(settings.model_name).description
    assert "no model in production yet" in description
    assert "better than production by the margin" not in description
