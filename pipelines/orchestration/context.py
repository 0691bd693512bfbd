"""What every step is called with, and the call itself: one way in for Kubeflow, inline and DVC.

The context (settings, contract, MLflow pointed at the settings' stores) is made once per process:
once per run by the inline runner, once per task in a Kubeflow or DVC step process, where the
settings arrive as one serialized settings record (kfp.local), MLOPS_* variables (Kubeflow) or
params.yaml (DVC).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from mlops.contract import DataContract, load_contract
from mlops.registry_client import activate
from pipelines.orchestration.declaration import STEPS, Step, record_type
from pipelines.orchestration.records import (
    FailureRecord,
    StepRecord,
    failure_reason,
    is_bad_input,
    read_record,
    write_record,
)
from pipelines.settings import PipelineSettings


@dataclass(frozen=True)
class StepContext:
    settings: PipelineSettings
    contract: DataContract
    # DVC stages: train opens a model run nested under the data run (pipelines/orchestration/records.py).
    separate_model_run: bool = False

    @classmethod
    def of(cls, settings: PipelineSettings, *, separate_model_run: bool = False) -> StepContext:
        activate(settings)  # the steps log through MLflow's fluent API: its global URIs, once
        return cls(settings, load_contract(settings.contract_path), separate_model_run)


def step_function(step: Step) -> Callable[..., StepRecord | None]:
    module, name = step.function.split(":")
    return cast(Callable[..., StepRecord | None], getattr(importlib.import_module(module), name))


def call_step(step: Step, context: StepContext, arguments: Mapping[str, Any],
              failure: Path | None = None) -> StepRecord | None:
    """Run ``step``'s function with its arguments; its record (None when it returns none).

    A failure leaves a FailureRecord at ``failure`` when given: what the runner reports, since the
    error itself does not cross kfp.local's process boundary.
    """
    try:
        return step_function(step)(context, **arguments)
    except Exception as exc:
        if failure is not None:
            write_record(failure, FailureRecord(step=step.name, reason=failure_reason(exc),
                                                bad_input=is_bad_input(exc)))
        raise


def file_arguments(step: Step, parameters: Mapping[str, Any], paths: Mapping[str, Path],
                   steps: tuple[Step, ...] = STEPS) -> dict[str, Any]:
    """The arguments of a step run from files (Kubeflow, DVC): records read from their JSON files.

    ``paths`` maps each consumed and produced artifact, and each taken record, to its path.
    """
    arguments: dict[str, Any] = {parameter.name: parameters[parameter.name] for parameter in step.parameters}
    for name in [consumed.name for consumed in step.consumes] + [produced.name for produced in step.produces]:
        arguments[name] = paths[name]
    for takes in step.takes:
        arguments[takes.name] = read_record(paths[takes.name], record_type(takes, steps))
    return arguments
