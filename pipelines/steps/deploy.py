"""Deploy: the rollout of an accepted version, and the tags a person reads beside it in MLflow's UI.

Evaluate's decision travels as a record (``VersionDecision``, which registry.register_version stores
with the version); the tags (promotion_tags) only repeat its decision, reason and headline metrics for
people. Only an accepted version is rolled out (deploy_version): by default onto staging and a canary
at ``canary_percent`` of the traffic, production moving only when the canary judge promotes it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from mlops import registry
from mlops.errors import PromotionConflictError
from pipelines.orchestration.records import Rollout
from pipelines.settings import PipelineSettings

if TYPE_CHECKING:  # evaluate pulls in scikit-learn, which the deploy step's process never needs
    from pipelines.steps.evaluate import EvaluationReport


# At most this many tags on a version (with run_id and, once deployed, deployed_at): the MLflow
# versions table shows every tag in its row, so they are the few a person reads there. Everything
# else evaluate measured (all metrics of both models, the rule's evidence, the margin) is in the
# version's model card and in its run's evaluation/report.json.
MAX_VERSION_TAGS = 8

def promotion_tags(report: EvaluationReport) -> dict[str, str]:
    """The decision, its reason, F1 and PR-AUC, and what it was compared with.

    ``production_version_at_evaluation`` is also what deploy's compare-and-set reads back."""
    tags = {
        "decision": report.decision,
        "decision_reason": report.reason,
        "candidate_f1": f"{report.candidate.f1:.4f}",
        "candidate_pr_auc": f"{report.candidate.pr_auc:.4f}",
        "production_version_at_evaluation": report.production_version or "none",
    }
    if report.production is not None:
        tags["production_f1"] = f"{report.production.f1:.4f}"
    return tags


def deploy_version(settings: PipelineSettings, version: str, *, expected: str | None, actor: str,
                   reason: str) -> Rollout:
    """Roll ``version`` out as the settings say; returns how.

    ``reason`` is evaluate's reason for the decision, word for word: the registry's audit record (and
    the registered model's description) says what the version's own card says.

    Compare-and-set: ``expected`` is the production version evaluate compared with; if production
    moved since, PromotionConflictError and nothing changes.
    """
    rollout: Rollout = "first" if expected is None else settings.rollout
    if rollout == "canary":
        current = registry.alias_version(settings)
        if current != expected:  # the candidate was judged against another champion than the canary's
            raise PromotionConflictError(
                f"alias {settings.serving_alias!r} moved since it was read: expected {expected}, now "
                f"{current or 'none'}; nothing changed")
        registry.promote(settings, version, alias=registry.STAGING_ALIAS, actor=actor, reason=reason)
        registry.start_canary(settings, version, settings.canary_percent, actor=actor, reason=reason)
    else:
        registry.promote(settings, version, expected=expected, actor=actor, reason=reason)
    # What it replaced is in the audit record (mlops model history).
    registry.tag_version(settings, version, {"deployed_at": datetime.now(UTC).isoformat(timespec="seconds")})
    return rollout
