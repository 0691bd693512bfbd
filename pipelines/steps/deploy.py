"""Deploy: the tags that record a version's promotion decision, and the promotion itself.

Every registered version carries its decision, metrics and reason as tags (see promotion_tags);
only a promoted one gets the serving alias and the Production stage (deploy_version).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from mlops import registry
from mlops.settings import Settings

if TYPE_CHECKING:  # evaluate pulls in scikit-learn, which the deploy step's process never needs
    from pipelines.steps.evaluate import EvaluationReport


def promotion_tags(report: EvaluationReport) -> dict[str, str]:
    tags = {
        "decision": report.decision,
        "decision_reason": report.reason,
        "promotion_margin": str(report.margin),
        "production_version_at_evaluation": report.production_version or "none",
    }
    tags.update({f"candidate_{k}": f"{v:.6f}" for k, v in report.candidate.model_dump().items()})
    if report.production is not None:
        tags.update({f"production_{k}": f"{v:.6f}" for k, v in report.production.model_dump().items()})
    if report.promotion is not None:
        tags.update({f"promotion_{k}": f"{v:.6f}" if isinstance(v, float) else str(v)
                     for k, v in report.promotion.model_dump().items() if v is not None})
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
    registry.tag_version(settings, version, {
        "deployed_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "replaced_version": previous or "none",
    })
    return previous
