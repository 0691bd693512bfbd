"""The Kubeflow pipeline, made from the declaration (pipelines/orchestration/declaration.py).

Compiled to pipelines/training_pipeline.yaml (IR YAML, committed); `mlops pipeline compile`
rewrites it and a test fails when it is stale.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kfp import compiler, dsl

from pipelines.cluster import run_on_gpu_queue, use_platform_mlflow
from pipelines.orchestration.declaration import RECORD, STEPS, Step, pipeline_parameters
from pipelines.orchestration.kfp_components import component

# The compiled graph serves every contract (its path is a setting), so its name is the platform's;
# runs are named after the contract (Settings.pipeline_name).
PIPELINE_NAME = "model-training"
PIPELINE_DESCRIPTION = "Raw data under its contract to a registered model; promotes only a better one."
COMPILED_PIPELINE = Path(__file__).parent.parent / "training_pipeline.yaml"


def _add_task(step: Step, steps: tuple[Step, ...], arguments: dict[str, Any], tasks: dict[str, Any]) -> Any:
    inputs = {parameter.name: arguments[parameter.name] for parameter in step.parameters}
    inputs |= {consumed.name: tasks[consumed.step].outputs[consumed.output] for consumed in step.consumes}
    inputs |= {taken.name: tasks[taken.step].outputs[RECORD] for taken in step.takes}
    if step.when is None:
        task = component(step, steps)(**inputs)
    else:
        with dsl.If(tasks[step.when.step].outputs["Output"] == step.when.equals, name=step.when.name):
            task = component(step, steps)(**inputs)
    for earlier in step.after:
        task.after(tasks[earlier])
    use_platform_mlflow(task)  # every step logs into the pipeline's MLflow run
    if step.resources.gpus:
        run_on_gpu_queue(task, gpus=step.resources.gpus)
    if step.resources.cpu:
        task.set_cpu_request(step.resources.cpu)
    if step.resources.memory:
        task.set_memory_request(step.resources.memory)
    # Every step reads or writes shared state (registry, feature store): never reuse cached results.
    task.set_caching_options(enable_caching=False)
    return task


def pipeline_function(steps: tuple[Step, ...] = STEPS) -> Callable[..., None]:
    """The pipeline function of ``steps``, its signature the steps' parameters (what KFP reads)."""
    parameters = pipeline_parameters(steps)

    def training_pipeline(*values: Any) -> None:
        arguments = dict(zip((parameter.name for parameter in parameters), values, strict=True))
        tasks: dict[str, Any] = {}
        for step in steps:
            tasks[step.name] = _add_task(step, steps, arguments, tasks)

    training_pipeline.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=p.type,
                           default=inspect.Parameter.empty if p.default is None else p.default)
         for p in parameters], return_annotation=None)
    return training_pipeline


def training_pipeline(steps: tuple[Step, ...] = STEPS) -> Any:
    """The pipeline of ``steps`` as a KFP graph component (untyped: kfp is)."""
    return dsl.pipeline(pipeline_function(steps), name=PIPELINE_NAME, description=PIPELINE_DESCRIPTION)


def compile_pipeline(path: Path = COMPILED_PIPELINE, steps: tuple[Step, ...] = STEPS) -> Path:
    compiler.Compiler().compile(training_pipeline(steps), package_path=str(path))
    return path
