"""The service in its own process over a home whose live rows are still to come (the canary tests')."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from feature_repo.store import materialize_online
from mlops.contract import DataContract
from pipelines.demo import free_port, start_service, wait_ready
from pipelines.settings import PipelineSettings


@contextmanager
def serving_before(settings: PipelineSettings, contract: DataContract, live: pd.DataFrame,
                   tmp: Path) -> Iterator[str]:
    """The service's base URL, the online store materialized to just before ``live``'s first row; the
    service's log is ``tmp``/serving.log, and it is stopped on leaving."""
    first = pd.Timestamp(live[contract.timestamp_column].min())
    materialize_online(settings, contract, (first - pd.Timedelta(microseconds=1)).to_pydatetime())
    port = free_port(settings.host)
    base, log = f"http://{settings.host}:{port}", tmp / "serving.log"
    process = start_service(settings.model_copy(update={"port": port}), port, log)
    try:
        wait_ready(base, process, log)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)
