"""Retraining on the freshest data: the drifted window's labelled predictions, written back as raw
transactions of the contract, and the training pipeline started on them in the background
(``mlops pipeline run`` embedded, ``mlops pipeline submit`` when MLOPS_KFP_HOST names a cluster),
through the core's declared PipelineTrigger: monitoring may not import pipelines (mlops.triggers).
The pipeline's own evaluate step decides whether the new model beats production by the margin.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pandas as pd

from mlops.contract import DataContract
from mlops.triggers import PipelineTrigger, start
from monitoring.labels import ID, LABEL, join_labels, read_labels
from monitoring.settings import MonitoringSettings


@dataclass(frozen=True)
class RetrainingStart:
    data: Path
    rows: int
    log: Path
    process: subprocess.Popen[bytes]


def labelled_transactions(window: pd.DataFrame, labels: pd.DataFrame, contract: DataContract) -> pd.DataFrame:
    """The window's labelled predictions as raw transactions with the contract's columns."""
    joined = join_labels(window, labels).rename(columns={ID: contract.id_column, LABEL: contract.label_column})
    return joined[[c.name for c in contract.columns]].sort_values(contract.timestamp_column, kind="stable")


def start_retraining(settings: MonitoringSettings, contract: DataContract, window: pd.DataFrame,
                     now: datetime) -> RetrainingStart:
    """Write the labelled window and start the pipeline on it; raises InputError when too few rows are labelled."""
    from mlops.errors import InputError

    data = labelled_transactions(window, read_labels(settings.monitoring_dir), contract)
    if len(data) < contract.min_rows:
        raise InputError(f"retraining needs at least {contract.min_rows} labelled transactions in the window; "
                         f"it has {len(data)} (ingest late labels with `mlops labels ingest FILE`)")
    folder = settings.monitoring_dir / "retraining"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = f"{now:%Y%m%dT%H%M%S%f}"
    path = folder / f"window-{stamp}.parquet"
    data.to_parquet(path, index=False)
    trigger = PipelineTrigger(data=path, run_name=f"drift-retraining-{stamp}", submit=bool(settings.kfp_host),
                              runner=settings.retrain_runner)
    log_path = folder / f"pipeline-{stamp}.log"
    with log_path.open("w") as output:
        process = start(trigger, output, new_session=True)
    return RetrainingStart(data=path, rows=len(data), log=log_path, process=process)
