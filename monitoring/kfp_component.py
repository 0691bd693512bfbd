"""The drift job as a Kubeflow Pipelines component and a one-step pipeline, for clusters that
schedule monitoring through KFP rather than the CronJob (infra/base/platform/drift-cronjob.yaml).
Both call monitoring.job.run_drift, as ``mlops drift run`` does."""

from pathlib import Path

from kfp import compiler, dsl

# The platform image (pipelines/Dockerfile): the repository installed with its extras.
MONITORING_IMAGE = "ghcr.io/mlops-platform/mlops-python:0.1.0"


@dsl.component(base_image=MONITORING_IMAGE, install_kfp_package=False)
def drift_check(since_hours: float, last: int) -> str:
    """Judge the last ``since_hours`` of the prediction log (newest ``last`` rows if > 0); returns the level."""
    from datetime import UTC, datetime, timedelta

    from monitoring.job import run_drift
    from monitoring.settings import MonitoringSettings
    from monitoring.window import WindowSpec

    start = datetime.now(UTC) - timedelta(hours=since_hours)
    return run_drift(MonitoringSettings(), WindowSpec(start=start, last=last or None)).level


@dsl.pipeline(name="drift-check", description="Drift of the prediction log against the serving model's reference.")
def drift_pipeline(since_hours: float = 1.0, last: int = 0) -> None:
    task = drift_check(since_hours=since_hours, last=last)
    task.set_caching_options(enable_caching=False)


def compile_drift_pipeline(path: Path) -> Path:
    compiler.Compiler().compile(drift_pipeline, package_path=str(path))
    return path
