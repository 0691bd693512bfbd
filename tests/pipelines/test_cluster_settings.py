"""The compiled pipeline's train task carries the accelerator type and count, the GPU
toleration, the GPU product node selector and the Kueue queue label, and they name things the
infra manifests define (the LocalQueue of the fraud team, a GPU flavor's product label). Every task
gets the MLflow server from the ConfigMap pipeline-config and the pipeline's account from the
Secret mlflow-admin, both of the manifests' pipeline namespace; no task carries a value of either."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.manifests import build_overlay, find_object
from infra.pods import tolerates_gpu_taint
from pipelines.cluster import (
    GPU_PRODUCT_LABEL,
    PIPELINE_CONFIG,
    PIPELINE_NAMESPACE,
    QUEUE_LABEL,
    TRACKING_SECRET,
    TRAIN_QUEUE,
)
from pipelines.orchestration.kfp_pipeline import compile_pipeline

pytestmark = pytest.mark.integration


def _compiled(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    pipeline, platform = yaml.safe_load_all(compile_pipeline(tmp_path / "pipeline.yaml").read_text())
    return pipeline, platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]


def test_only_the_train_task_asks_for_a_gpu_through_the_queue(tmp_path: Path) -> None:
    pipeline, kubernetes = _compiled(tmp_path)
    executors = pipeline["deploymentSpec"]["executors"]
    assert executors["exec-train"]["container"]["resources"]["accelerator"] == {
        "type": "nvidia.com/gpu", "resourceType": "nvidia.com/gpu", "count": "1", "resourceCount": "1"}
    assert [name for name, executor in executors.items() if "resources" in executor["container"]] == ["exec-train"]
    gpu_settings = ("tolerations", "nodeSelector", "podMetadata")
    assert [name for name, settings in kubernetes.items() if set(gpu_settings) & set(settings)] == ["exec-train"]
    train = kubernetes["exec-train"]
    assert [tolerates_gpu_taint(toleration) for toleration in train["tolerations"]] == [True]
    assert train["podMetadata"]["labels"][QUEUE_LABEL] == TRAIN_QUEUE
    assert train["podMetadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "batch-training"
    assert GPU_PRODUCT_LABEL in train["nodeSelector"]["labels"]


def test_the_train_task_names_a_queue_and_a_product_the_cluster_has(tmp_path: Path) -> None:
    _pipeline, kubernetes = _compiled(tmp_path)
    train = kubernetes["exec-train"]
    objects = build_overlay("prod")
    team_queues = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects if o["kind"] == "LocalQueue"}
    assert ("team-fraud", train["podMetadata"]["labels"][QUEUE_LABEL]) in team_queues
    flavors = [o for o in objects if o["kind"] == "ResourceFlavor"]
    products = {flavor["spec"].get("nodeLabels", {}).get(GPU_PRODUCT_LABEL) for flavor in flavors}
    assert train["nodeSelector"]["labels"][GPU_PRODUCT_LABEL] in products
    priorities = {o["metadata"]["name"] for o in objects if o["kind"] == "WorkloadPriorityClass"}
    assert train["podMetadata"]["labels"]["kueue.x-k8s.io/priority-class"] in priorities


def test_every_task_gets_mlflow_and_its_account_from_the_cluster_never_a_value(tmp_path: Path) -> None:
    pipeline, kubernetes = _compiled(tmp_path)
    executors = pipeline["deploymentSpec"]["executors"]
    assert len(executors) == 7
    assert set(kubernetes) == set(executors)
    for name, settings in kubernetes.items():
        secrets = {(source["secretName"], pair["secretKey"], pair["envVar"])
                   for source in settings["secretAsEnv"] for pair in source["keyToEnv"]}
        assert secrets == {(TRACKING_SECRET, "username", "MLOPS_TRACKING_USERNAME"),
                           (TRACKING_SECRET, "password", "MLOPS_TRACKING_PASSWORD")}, name
        assert [source["secretNameParameter"]["runtimeValue"]["constant"] for source in settings["secretAsEnv"]] \
            == [TRACKING_SECRET]
        assert [(source["configMapName"], pair["envVar"]) for source in settings["configMapAsEnv"]
                for pair in source["keyToEnv"]] == [(PIPELINE_CONFIG, "MLOPS_TRACKING_URI")], name
        assert "env" not in executors[name]["container"], name  # no literal variable, secret or not


def test_the_pipeline_config_names_the_mlflow_service_the_manifests_run() -> None:
    objects = build_overlay("prod")
    config = find_object(objects, "ConfigMap", PIPELINE_CONFIG)
    service = find_object(objects, "Service", "mlflow")
    assert (config["metadata"]["namespace"], service["metadata"]["namespace"]) == (PIPELINE_NAMESPACE, "mlops")
    port = service["spec"]["ports"][0]["port"]
    assert config["data"] == {"MLOPS_TRACKING_URI": f"http://mlflow.mlops.svc:{port}"}
