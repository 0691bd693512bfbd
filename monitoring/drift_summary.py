"""The top of a drift report: the features by severity, as a table above Evidently's sections and
as the few worst named by the CLI, so what drifted is read first; then the estimated quality."""

from __future__ import annotations

from html import escape

from monitoring.drift import LEVELS, DriftReport, DriftThresholds, FeatureDrift, Level
from monitoring.estimated_quality import JUDGED, EstimatedQuality, Interval

_COLOURS = {"INFO": "#2e7d32", "WARNING": "#ef6c00", "CRITICAL": "#c62828"}


def by_severity(features: list[FeatureDrift]) -> list[FeatureDrift]:
    """Highest level first; within a level significant tests first, then the larger score."""
    return sorted(features, key=lambda f: (-LEVELS.index(f.level), not f.test_drift, -(f.score or 0.0), f.feature))


def describe(feature: FeatureDrift) -> str:
    score = f" score {feature.score:.3g}" if feature.score is not None else ""
    test = f", {feature.test} p {feature.p_value:.3g}" if feature.p_value is not None else ""
    return f"{feature.feature} {feature.level}{score}{test}"


def worst(report: DriftReport, count: int = 3) -> list[str]:
    return [f"v{report.model_version}/{describe(f)}" for f in by_severity(report.features)[:count]]


# What to do next, by the report's level.
_NEXT: dict[Level, str] = {
    "INFO": "Nothing to do: no feature moved both far and significantly.",
    "WARNING": "Next: look at the WARNING features' source (a new merchant, a changed upstream field), watch the "
               "next runs (`mlops drift history`) and, once labels arrive, the quality (`mlops labels quality`).",
    "CRITICAL": "Next: the CRITICAL features changed for real; the run's actions (fallback, retraining, see "
                "`mlops drift history`) have started, so check their source and the retrained version's decision "
                "(`mlops model list`).",
}


def levels_sentence(limits: DriftThresholds) -> str:
    """One sentence on what a level means: a large shift and a significant test, both."""
    return (f"A feature is WARNING or CRITICAL only when its shift is large (PSI at least {limits.psi_warning:g} or "
            f"{limits.psi_critical:g}, or its share's change past its threshold) and its test is significant "
            f"(p below {limits.p_value:g} over all the run's tests); Evidently's sections below say "
            f"\"drift detected\" from their test alone, so a feature they flag can be INFO here.")


def summary_html(report: DriftReport, limits: DriftThresholds | None = None) -> str:
    rows = "".join(
        f"<tr><td>{escape(f.feature)}</td><td style='color:{_COLOURS[f.level]};font-weight:bold'>{f.level}</td>"
        f"<td>{'' if f.score is None else f'{f.score:.4g}'}</td><td>{f.test}</td>"
        f"<td>{'' if f.p_value is None else f'{f.p_value:.3g}'}</td><td>{f.rows:,}</td><td>{escape(f.note)}</td></tr>"
        for f in by_severity(report.features))
    return (f"<section id='drift-summary' style='font-family:sans-serif;margin:16px'>"
            f"<h2>Drift {report.level}: {escape(report.model_name)} v{escape(report.model_version)}, "
            f"{report.rows:,} predictions</h2>"
            f"<p id='drift-levels'>{escape(levels_sentence(limits or DriftThresholds()))}</p>"
            f"<p id='drift-next'><b>{escape(_NEXT[report.level])}</b></p>"
            f"<table border='1' cellpadding='4' style='border-collapse:collapse'>"
            f"<tr><th>feature</th><th>level</th><th>score</th><th>test</th><th>p-value</th><th>rows</th>"
            f"<th>note</th></tr>{rows}</table></section>")


def estimate_html(estimated: list[EstimatedQuality]) -> str:
    """The quality the window is expected to have without labels, per role, against the reference."""
    def cell(interval: Interval) -> str:
        return f"{interval.estimate:.3f} [{interval.low:.3f}, {interval.high:.3f}]"

    rows = "".join(
        f"<tr><td>{escape(e.role)}</td><td style='color:{_COLOURS[e.level]};font-weight:bold'>{e.level}</td>"
        + "".join(f"<td>{cell(e.estimate.metric(m))}</td><td>"
                  f"{'' if e.reference is None else f'{e.reference.metric(m).estimate:.3f}'}</td>" for m in JUDGED)
        + f"<td>{escape(e.note)}</td></tr>" for e in estimated)
    headers = "".join(f"<th>estimated {m} [95 %]</th><th>reference {m}</th>" for m in JUDGED)
    return (f"<section id='estimated-quality' style='font-family:sans-serif;margin:16px'>"
            f"<h3>Quality estimated without labels</h3>"
            f"<table border='1' cellpadding='4' style='border-collapse:collapse'>"
            f"<tr><th>role</th><th>level</th>{headers}<th>note</th></tr>{rows}</table></section>")


def prepend_summary(html: str, summary: str) -> str:
    """``summary`` right after the document's opening body tag (at the very top when there is none)."""
    start = html.find("<body")
    if start < 0:
        return summary + html
    end = html.index(">", start) + 1
    return html[:end] + summary + html[end:]
