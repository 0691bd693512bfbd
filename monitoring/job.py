"""The drift job (``mlops drift run``, the KFP component and the CronJob all call ``run_drift``):
the window of the prediction log against the reference profile of each model version that
served it, the quality each version is expected to have without labels, the Evidently report, the
metrics, the actions, the record. The window is read a column at a time from the log's segments
(:mod:`monitoring.log_window`), so its size is bounded by the disk, not by memory.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

from mlops.contract import DataContract, load_contract
from mlops.errors import EmptyWindowError, MLOpsError, SmallWindowError
from mlops.prediction_log import log_dir
from mlops.settings import Settings
from monitoring import actions, metrics
from monitoring.calibration_guard import read_checks
from monitoring.drift import DriftReport, DriftThresholds, compute_drift, max_level
from monitoring.drift_summary import by_severity, describe, estimate_html, prepend_summary, summary_html
from monitoring.estimated_quality import METRICS, EstimatedQuality, EstimateThresholds, estimate_roles
from monitoring.evidently_report import evidently_snapshot, render_html
from monitoring.log_window import LogWindow, open_window
from monitoring.references import fetch_profile
from monitoring.retraining import RetrainingStart, start_retraining
from monitoring.settings import MonitoringSettings
from monitoring.window import WindowSpec

log = logging.getLogger(__name__)
# Evidently's HTML panels take a minute and gigabytes at a million rows: drawn from a sample beyond this.
REPORT_MAX_ROWS = 100_000
# Retraining runs started by this process (their Popen objects must outlive the job's call).
_RUNNING: list[RetrainingStart] = []


def thresholds(settings: MonitoringSettings) -> DriftThresholds:
    return DriftThresholds(psi_warning=settings.drift_psi_warning, psi_critical=settings.drift_psi_critical,
                           min_rows=settings.drift_min_rows)


def judge(settings: Settings, window: LogWindow, limits: DriftThresholds,
          cluster: str | None = None) -> list[tuple[DriftReport, LogWindow]]:
    """A report per (model, version) that served at least ``min_rows`` of the window; categorical tests
    count each value of ``cluster`` (an entity key) once."""
    judged = []
    groups = list(window.groups(["model_name", "model_version"]))
    for (name, version), group in groups:
        if len(group) < limits.min_rows:
            log.info("%s v%s served only %d rows of the window; not judged", name, version, len(group))
            continue
        profile = fetch_profile(settings, name, version)
        report = compute_drift(group, profile, limits, model_name=name, model_version=version, cluster=cluster)
        judged.append((report, group))
    if not judged:
        served = ", ".join(f"v{version}: {len(group)}" for (_, version), group in groups)
        raise SmallWindowError(f"no model version served {limits.min_rows} predictions of the window ({served})")
    return judged


def estimates(settings: MonitoringSettings, contract: DataContract,
              judged: list[tuple[DriftReport, LogWindow]]) -> list[EstimatedQuality]:
    """The quality each judged version's window is expected to have, per role, against its reference,
    through the score map of the version's latest calibration check (else its profile's); distrusted
    where that check failed."""
    limits = EstimateThresholds(drop_warning=settings.estimate_drop_warning,
                                drop_critical=settings.estimate_drop_critical)
    checks = read_checks(settings.monitoring_dir)
    estimated: list[EstimatedQuality] = []
    for report, window in judged:
        check = checks.get(report.model_version)
        distrust = (check.unreliable(settings.calibration_ece_limit, settings.calibration_min_labelled)
                    if check else None)
        profile = fetch_profile(settings, report.model_name, report.model_version)
        estimated += estimate_roles(window, profile, contract.decisions.positive, limits,
                                    model_name=report.model_name,
                                    model_version=report.model_version, unreliable=distrust,
                                    score_map=check.score_map if check else None)
    return estimated


def _reason(reports: list[DriftReport], estimated: list[EstimatedQuality]) -> str:
    flagged = [f"v{r.model_version}/{f.feature} {f.level} ({f.score:.3g})" for r in reports for f in r.flagged()
               if f.score is not None]
    notes = [f"v{r.model_version}/{f.feature}: {f.note}" for r in reports for f in r.features
             if f.note and f.level != "INFO"]
    quality = [f"v{e.model_version}/{e.role} estimated quality {e.level}: {e.note}" for e in estimated
               if e.level != "INFO"]
    return "; ".join(quality + flagged + notes) or "no feature drifted"


def _worst(reports: list[DriftReport], count: int = 3) -> list[str]:
    ranked = by_severity([f for r in reports for f in r.features])
    versions = {id(f): r.model_version for r in reports for f in r.features}
    return [f"v{versions[id(f)]}/{describe(f)}" for f in ranked[:count]]


def _report_html(settings: Settings, report: DriftReport, window: LogWindow, now: datetime,
                 limits: DriftThresholds, estimated: list[EstimatedQuality]) -> str:
    profile = fetch_profile(settings, report.model_name, report.model_version)
    path = settings.monitoring_dir / "reports" / f"drift-{now:%Y%m%dT%H%M%S}-v{report.model_version}.html"
    shown = window.sample(REPORT_MAX_ROWS).frame([f.feature for f in report.features])  # what Evidently draws
    render_html(evidently_snapshot(report, profile, shown), path)
    ours = [e for e in estimated if e.model_version == report.model_version]
    top = summary_html(report, limits) + estimate_html(ours)
    if len(shown) < len(window):
        top += (f"<p>Evidently's panels below are drawn from a seeded sample of {len(shown):,} of the window's "
                f"{len(window):,} predictions; the levels above judge all of them.</p>")
    path.write_text(prepend_summary(path.read_text(encoding="utf-8"), top), encoding="utf-8")
    return str(path)


def _log_to_mlflow(settings: Settings, reports: list[DriftReport], record: actions.DriftRunRecord) -> None:
    import mlflow

    from mlops import registry
    from mlops.registry_client import activate

    # Created like the training experiment, so a local store keeps its artifacts under home (not ./mlruns).
    monitoring = settings.model_copy(update={"experiment": f"{settings.experiment}-monitoring"})
    experiment_id = registry.ensure_experiment(monitoring)
    activate(monitoring)  # the drift run logs through MLflow's fluent API
    with mlflow.start_run(experiment_id=experiment_id, run_name=f"drift-{record.run_at:%Y%m%dT%H%M%S}"):
        mlflow.set_tags({"level": record.level, "actions": ",".join(record.actions),
                         "model_versions": ",".join(record.model_versions)})
        mlflow.log_metrics({f"v{r.model_version}.{f.feature}": f.score for r in reports for f in r.features
                            if f.score is not None})
        mlflow.log_metrics({f"v{e.model_version}.{e.role}.estimated_{metric}": e.estimate.metric(metric).estimate
                            for e in record.estimates for metric in METRICS})
        mlflow.log_text(record.model_dump_json(indent=2), "drift/record.json")
        for path in record.report_paths:
            mlflow.log_artifact(path, "drift")


def run_drift(settings: MonitoringSettings, spec: WindowSpec, *, limits: DriftThresholds | None = None,
              now: datetime | None = None) -> actions.DriftRunRecord:
    """Judge the window, act on the verdict, record and export it; the record says what happened."""
    started = time.perf_counter()
    now = now or datetime.now(UTC)
    limits = limits or thresholds(settings)
    contract = load_contract(settings.contract_path)
    window = open_window(log_dir(settings), spec)
    if window.empty:
        raise EmptyWindowError(f"no predictions logged in {spec.describe()} ({log_dir(settings)}); "
                               "send some: `make demo` replays the test split, or `make serve` and POST "
                               "transactions to /predict")
    judged = judge(settings, window, limits, contract.entities[0].join_key if contract.entities else None)
    reports = [report for report, _ in judged]
    estimated = estimates(settings, contract, judged)
    level = max_level([r.level for r in reports] + [e.level for e in estimated])
    history = actions.read_history(settings.monitoring_dir)
    planned = actions.planned_actions(level, history, now, timedelta(seconds=settings.drift_cooldown_s),
                                      retrain=settings.drift_retrain)
    record = actions.DriftRunRecord(
        run_at=now, window=spec.describe(), model_name=reports[0].model_name,
        model_versions=[r.model_version for r in reports], rows=len(window), level=level,
        reason=_reason(reports, estimated), estimates=estimated,
        scores={f"v{r.model_version}/{f.feature}": f.score for r in reports for f in r.features if f.score is not None},
        actions=planned, report_paths=[_report_html(settings, r, w, now, limits, estimated) for r, w in judged],
        worst=_worst(reports))
    record = _act(settings, contract, window, record, now)
    actions.append_history(settings.monitoring_dir, record)
    _log_to_mlflow(settings, reports, record)
    metrics.publish(metrics.drift_registry(reports, estimated, time.perf_counter() - started), metrics.DRIFT_JOB,
                    settings.monitoring_dir, settings.pushgateway_url)
    log.log(logging.WARNING if level != "INFO" else logging.INFO, "drift %s: %s -> %s", level, record.reason,
            ", ".join(record.actions))
    return record


def _act(settings: MonitoringSettings, contract: DataContract, window: LogWindow, record: actions.DriftRunRecord,
         now: datetime) -> actions.DriftRunRecord:
    errors: list[str] = []
    update: dict[str, object] = {}
    if actions.ACTING in record.actions:
        try:
            token = settings.admin_token.get_secret_value() if settings.admin_token else None
            actions.switch_to_fallback(settings.resolved_service_url, token,
                                       f"drift {record.level}: {record.reason}"[:500], dev_mode=settings.dev_mode)
        except MLOpsError as exc:
            errors.append(f"fallback: {exc.message}")
    if "retrain" in record.actions:
        try:
            started: RetrainingStart = start_retraining(settings, contract, window.frame(), now)
            update = {"retraining_data": str(started.data), "retraining_log": str(started.log),
                      "retraining_pid": started.process.pid}
            _RUNNING.append(started)
        except MLOpsError as exc:
            errors.append(f"retrain: {exc.message}")
    return record.model_copy(update={**update, "action_errors": errors})


def running_retrainings() -> list[RetrainingStart]:
    """Retraining runs this process started, so a caller (a test, a long-lived scheduler) can wait on them."""
    return list(_RUNNING)
