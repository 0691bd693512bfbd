"""The model card: a registered version's description in Markdown, shown on its page in the MLflow UI.

It says what the version learned from (source, snapshot hash, split sizes), how it scored on the
test split at its operating threshold (beside production), how well calibrated it is, how each
slice did, what the behavioural tests found, what evaluate decided and why, and where to look
next (the run, its datasets, the pictures). The decision and its reason are evaluate's own
(``EvaluationReport.decision`` / ``.reason``), never recomputed here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlflow.entities import Run

if TYPE_CHECKING:
    from pipelines.steps.evaluate import EvaluationReport, Metrics
    from pipelines.steps.promotion import PromotionEvidence
    from pipelines.steps.quality import SliceMetrics

_METRICS = (("F1", "f1"), ("precision", "precision"), ("recall", "recall"), ("PR-AUC", "pr_auc"),
            ("ROC-AUC", "roc_auc"), ("threshold", "threshold"))
_SPLITS = ("train", "validation", "test")
_PICTURES = ("pr_curve.png", "confusion_matrix.png", "reliability_curve.png")


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _slice_row(s: SliceMetrics) -> str:
    if s.f1 is None or s.precision is None or s.recall is None:  # under the minimum size: counted, not scored
        return f"| {_cell(s.name)} | {s.rows} | {s.positives} | (too few rows) | - | - |"
    return f"| {_cell(s.name)} | {s.rows} | {s.positives} | {s.f1:.4f} | {s.precision:.4f} | {s.recall:.4f} |"


def _evidence_line(evidence: PromotionEvidence) -> str:
    line = (f"Promotion evidence: {evidence.rows} test rows, base rate {evidence.base_rate:.4f}, PR-AUC "
            f"{evidence.pr_auc_lift:.2f} times the base rate")
    if evidence.f1_gain is not None and evidence.f1_gain_low is not None and evidence.f1_gain_high is not None:
        line += (f"; F1 gain over production {evidence.f1_gain:+.4f}, interval [{evidence.f1_gain_low:+.4f}, "
                 f"{evidence.f1_gain_high:+.4f}]")
    return line + "."


def _metric_rows(candidate: Metrics, production: Metrics | None) -> list[str]:
    rows = ["| metric (test split) | this version | production |", "|---|---|---|"]
    for label, key in _METRICS:
        theirs = f"{getattr(production, key):.4f}" if production is not None else "-"
        rows.append(f"| {label} | {getattr(candidate, key):.4f} | {theirs} |")
    return rows


def _calibration_choice(params: dict[str, str], metrics: dict[str, float]) -> str:
    """Which map calibrates the score and why: the top-decile error is the one the estimate before labels
    leans on."""
    errors = ", ".join(f"{label} {metrics[key]:.4f}" for label, key in (
        ("ECE", "val_ece"), ("top-decile ECE", "val_top_decile_ece")) if key in metrics)
    setting = _cell(params.get("calibration_setting", "?"))
    measured = f"; validation {errors}" if errors else ""
    return f"Calibration map: `{_cell(params['calibration'])}` (setting `{setting}`{measured})."


def render_model_card(report: EvaluationReport, *, model_name: str, version: str, run: Run) -> str:
    """The card of ``version``, registered from ``run`` after evaluate wrote ``report``."""
    params, tags = run.data.params, run.data.tags
    candidate = report.candidate
    lines = [f"# {model_name} version {version}", "",
             f"**Decision: {report.decision}** - {_cell(report.reason)}", "",
             f"Decides positive when its calibrated probability is at least "
             f"**{candidate.threshold:.4f}** (the operating threshold, chosen on the validation split).", ""]
    if "model_family" in params:  # runs from before model families carry none
        chosen = f", parameters `{_cell(params['model_params'])}`" if "model_params" in params else ""
        lines += ["## Model", "", f"- family: `{_cell(params['model_family'])}`{chosen}", ""]
    lines += ["## Data", "",
              f"- source: `{_cell(params.get('source', 'unknown'))}`",
              f"- snapshot sha256: `{params.get('dataset_sha256', 'unknown')}` "
              f"({_cell(params.get('dataset_rows', '?'))} rows, contract `{_cell(params.get('contract', '?'))}`)"]
    for split in _SPLITS:
        if f"{split}_rows" in params:
            lines.append(f"- {split}: {params[f'{split}_rows']} rows, {params.get(f'{split}_positives', '?')} positive")
    lines += ["", "## Metrics", "", *_metric_rows(candidate, report.production)]
    if report.production_version is not None:
        lines += ["", f"Production at evaluation: version {report.production_version}; promotion margin "
                      f"{report.margin} on F1."]
    if report.promotion is not None:
        lines += ["", _evidence_line(report.promotion)]
    if report.calibration is not None:
        lines += ["", "## Calibration", "",
                  f"Brier score {report.calibration.brier:.4f}, expected calibration error "
                  f"{report.calibration.ece:.4f} (test split, {len(report.calibration.bins)} bins)."]
        if "calibration" in params:  # runs from before the choice carry none: Platt
            lines += ["", _calibration_choice(params, run.data.metrics)]
    if report.slices:
        lines += ["", "## Slices", "", "| slice | rows | positives | F1 | precision | recall |",
                  "|---|---|---|---|---|---|"]
        lines += [_slice_row(s) for s in report.slices]
    if report.behaviour is not None:
        b = report.behaviour
        verdict = "; ".join(b.failures) or "passed"
        lines += ["", "## Behavioural tests", "",
                  f"- invariance: changing {', '.join(f'`{n}`' for n in b.invariance_fields)} moves the score "
                  f"by at most {b.invariance_max_abs_diff:.3g}"]
        lines += [f"- direction ({r.direction.replace('_', ' ')}): scaling `{r.input}` by {r.factor:g} moves the "
                  f"mean score by {r.mean_delta:+.4f}" for r in b.directional]
        lines += [f"- verdict: {_cell(verdict)}"]
    experiment, run_id = run.info.experiment_id, run.info.run_id
    # The run's artifact view opened at the file (the UI shows a picture there); relative to the UI's root.
    artifacts = f"#/experiments/{experiment}/runs/{run_id}/artifactPath/evaluation"
    lines += ["", "## Lineage", "",
              f"- MLflow run: [{run_id}](#/experiments/{experiment}/runs/{run_id}) (its Datasets panel lists "
              "train, validation and test with the snapshot hash as digest)",
              f"- git commit: `{params.get('git_commit', 'unknown')}`; training fingerprint: "
              f"`{tags.get('training_fingerprint', params.get('training_fingerprint', 'unknown'))}`",
              "- pictures, each marking the operating threshold: "
              + ", ".join(f"[{name}]({artifacts}/{name})" for name in _PICTURES),
              f"- every figure evaluate measured: [evaluation/report.json]({artifacts}/report.json)"]
    return "\n".join(lines) + "\n"
