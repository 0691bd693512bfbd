"""Deploy: the tags that record a version's promotion decision, and the promotion itself.

Every registered version carries its decision, reason and headline metrics as tags (see promotion_tags);
only a promoted one gets the serving alias and the Production stage (deploy_version).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from mlops import registry
from mlops.settings import Settings

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


def deploy_version(settings: Settings, version: str, *, expected: str | None, actor: str, reason: str) -> str | None:
    """Move the serving alias and Production stage to ``version``; returns the version it replaced.

    ``reason`` is evaluate's reason for the decision, word for word: the registry's audit record (and
    the registered model's description) says what the version's own card says.

    Compare-and-set: ``expected`` is the production version evaluate compared with; if production
    moved since, PromotionConflictError and nothing changes.
    """
    previous = registry.promote(settings, version, expected=expected, actor=actor,
                                reason=reason)
    # The version it replaced is in the audit record (mlops model history).
    registry.tag_version(settings, version, {"deployed_at": datetime.now(UTC).isoformat(timespec="seconds")})
    return previous
