"""KFP components made from the declaration: one lightweight Python component per step.

KFP ships a component function's source into the task's container and reads the real types of
its signature, so each component's source is written here from its step's declaration: artifact
inputs as ``Input[...]``, artifact outputs and the record as ``Output[...]``, parameters with their
defaults, and one body for all, :func:`pipelines.orchestration.kfp_entry.run_task`. The source is
registered with :mod:`linecache`, where :func:`inspect.getsource` finds it. The image holds this
repository installed with the [pipelines] extra, so no packages are installed at run time.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import Any

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output

from pipelines.orchestration.declaration import RECORD, STEPS, Parameter, Step, exposed_field, step_named

# The platform image (pipelines/Dockerfile); KFP's local runner uses the current environment.
PIPELINE_IMAGE = "ghcr.io/mlops-platform/mlops-python:0.1.0"
_TYPES: dict[str, Any] = {"Input": Input, "Output": Output, "Artifact": Artifact, "Dataset": Dataset, "Model": Model}


def _parameter(parameter: Parameter) -> str:
    text = f"{parameter.name}: {parameter.type.__name__}"
    return text if parameter.default is None else f"{text} = {parameter.default!r}"


def component_source(step: Step, steps: tuple[Step, ...] = STEPS) -> str:
    """The component function of ``step`` as Python source."""
    required = [_parameter(p) for p in step.parameters if p.default is None]
    required += [f"{c.name}: Input[{step_named(c.step, steps).produced(c.output).kind}]" for c in step.consumes]
    required += [f"{t.name}: Input[Artifact]" for t in step.takes]
    required += [f"{p.name}: Output[{p.kind}]" for p in step.produces]
    if step.record is not None:
        required.append(f"{RECORD}: Output[Artifact]")
    optional = [_parameter(p) for p in step.parameters if p.default is not None]
    returns = "str" if exposed_field(step, steps) else "None"
    call = f"run_task({step.name!r}, locals())"
    return (f"def {step.name}({', '.join(required + optional)}) -> {returns}:\n"
            f"    {step.summary!r}\n"
            "    from pipelines.orchestration.kfp_entry import run_task\n\n"
            f"    {'return ' + call if returns == 'str' else call}\n")


def component_function(step: Step, steps: tuple[Step, ...] = STEPS) -> Callable[..., Any]:
    """The component function of ``step``, compiled from :func:`component_source`."""
    source = component_source(step, steps)
    filename = f"<kfp component {step.name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = dict(_TYPES)
    exec(compile(source, filename, "exec", dont_inherit=True), namespace)  # our own source, from the declaration
    function: Callable[..., Any] = namespace[step.name]
    return function


def component(step: Step, steps: tuple[Step, ...] = STEPS) -> Any:
    """``step`` as a KFP component (untyped: kfp is)."""
    return dsl.component(component_function(step, steps), base_image=PIPELINE_IMAGE, install_kfp_package=False)
