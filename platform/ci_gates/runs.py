"""Which MLflow run a gate judges: the newest one that logged a given parameter, or a named one.

The data gate wants the newest pipeline run (its ingest logged ``dataset_sha256``); the
reproducibility gate the newest run that trained (its train step logged ``train_sha256``). Any
tracking-store failure is a RegistryError: a gate that cannot look never passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlops import registry
from mlops.errors import NotFoundError, RegistryError
from mlops.settings import Settings

if TYPE_CHECKING:
    from mlflow.entities import Run

INGESTED = "dataset_sha256"  # logged by the pipeline's ingest step
TRAINED = "train_sha256"  # logged by every training run (pipeline train step, `mlops train`)


def newest_run(settings: Settings, with_param: str, run_id: str | None = None) -> Run:
    """Run ``run_id`` (when given) or the newest run of the experiment that logged ``with_param``."""
    from mlflow.exceptions import MlflowException

    try:
        client = registry.client(settings)
        if run_id is not None:
            runs = [client.get_run(run_id)]
        else:
            experiment = client.get_experiment_by_name(settings.experiment)
            runs = [] if experiment is None else client.search_runs(
                [experiment.experiment_id], filter_string=f"params.{with_param} != ''",
                order_by=["attributes.start_time DESC"], max_results=1)
    except MlflowException as exc:
        if getattr(exc, "error_code", "") == "RESOURCE_DOES_NOT_EXIST":
            raise NotFoundError(f"no MLflow run {run_id!r}") from exc
        raise RegistryError(f"tracking store failed: {exc.message}") from exc
    except Exception as exc:  # a store can fail in any way (connection, SQL); none of them is "no run"
        raise RegistryError(f"tracking store unreachable: {type(exc).__name__}: {exc}") from exc
    if not runs:
        raise NotFoundError(f"no run in experiment {settings.experiment!r} under {settings.resolved_home} "
                            f"logged {with_param}; run the pipeline first (mlops pipeline run)")
    if with_param not in runs[0].data.params:
        raise NotFoundError(f"run {runs[0].info.run_id} did not log {with_param}")
    return runs[0]
