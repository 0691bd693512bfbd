"""The train task's GPU request compiles into the IR as Kubernetes resource limits."""

# No `from __future__ import annotations`: KFP reads the pipeline function's real types.

from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp import compiler, dsl

from mlops.errors import ConfigError
from pipelines.orchestration.declaration import step_named
from pipelines.orchestration.kfp_components import component
from pipelines.training.accelerators import request_gpus

pytestmark = pytest.mark.unit


def _compiled_train_resources(tmp_path: Path, gpus: int, mig_profile: str | None) -> dict[str, Any]:
    @dsl.pipeline(name="gpu-request")  # type: ignore[untyped-decorator]  # kfp is untyped
    def pipeline() -> None:
        data = dsl.importer(artifact_uri="file:///tmp/x.parquet", artifact_class=dsl.Dataset)
        record = dsl.importer(artifact_uri="file:///tmp/ingest.json", artifact_class=dsl.Artifact)
        task = component(step_named("train"))(train=data.output, validation=data.output, test=data.output,
                                              ingested=record.output)
        request_gpus(task, gpus, mig_profile)

    path = tmp_path / "pipeline.yaml"
    compiler.Compiler().compile(pipeline, package_path=str(path))
    container = yaml.safe_load(path.read_text())["deploymentSpec"]["executors"]["exec-train"]["container"]
    resources: dict[str, Any] = container.get("resources", {})
    return resources


def test_whole_gpus_are_requested_as_nvidia_gpus(tmp_path: Path) -> None:
    resources = _compiled_train_resources(tmp_path, 4, None)
    assert resources["accelerator"]["resourceType"] == "nvidia.com/gpu"
    assert resources["accelerator"]["resourceCount"] == "4"


def test_a_mig_slice_is_requested_as_its_mig_resource(tmp_path: Path) -> None:
    resources = _compiled_train_resources(tmp_path, 1, "1g.10gb")
    assert resources["accelerator"]["resourceType"] == "nvidia.com/mig-1g.10gb"
    assert resources["accelerator"]["resourceCount"] == "1"


def test_no_gpu_requests_nothing(tmp_path: Path) -> None:
    assert "accelerator" not in _compiled_train_resources(tmp_path, 0, None)


@pytest.mark.parametrize(("gpus", "profile", "message"), [(-1, None, "0 or more"), (1, "big", "not like"),
                                                           (2, "1g.10gb", "one MIG slice")])
def test_bad_requests_are_refused(tmp_path: Path, gpus: int, profile: str | None, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _compiled_train_resources(tmp_path, gpus, profile)
