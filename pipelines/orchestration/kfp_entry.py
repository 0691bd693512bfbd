"""The body of every KFP component: a step run inside its Kubeflow (or kfp.local) task.

The component's arguments arrive as KFP's artifact objects and plain values; the step's records
travel as JSON artifacts. Settings come from the settings record the runner hands each kfp.local
task (MLOPS_SETTINGS_JSON), or on Kubeflow from the pod's MLOPS_* variables, once per task.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipelines.orchestration.declaration import RECORD, exposed_field, step_named


def run_task(name: str, values: Mapping[str, Any]) -> str | None:
    """Run step ``name`` on the component's ``values``; the exposed record field when the step has one."""
    from pipelines.logs import configure_logging
    from pipelines.orchestration.context import StepContext, call_step, file_arguments
    from pipelines.orchestration.records import FAILURE, write_record
    from pipelines.settings import PipelineSettings

    configure_logging()
    step = step_named(name)
    paths = {key: Path(value.path) for key, value in values.items() if hasattr(value, "path")}
    # kfp.local gives each task one folder, <pipeline root>/<kfp run>/<task>/, for all its outputs.
    outputs = [paths[p.name] for p in step.produces] + ([paths[RECORD]] if step.record is not None else [])
    record = call_step(step, StepContext.of(PipelineSettings()), file_arguments(step, values, paths),
                       failure=outputs[0].parent / FAILURE)
    if record is None:
        return None
    write_record(paths[RECORD], record)
    exposed = exposed_field(step)
    return None if exposed is None else str(getattr(record, exposed))
