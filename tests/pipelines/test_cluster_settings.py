"""The compiled pipeline's train task carries the accelerator type and count, the GPU
toleration, the GPU product node selector and the Kueue queue label, and they name things the
infra manifests define (the LocalQueue of the fraud team, a GPU flavor's product label)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from infra.manifests import build_overlay
from infra.pods import tolerates_gpu_taint
from pipelines.cluster import GPU_PRODUCT_LABEL, QUEUE_LABEL, TRAIN_QUEUE
from pipelines.orchestration.kfp_pipeline import compile_pipeline


def _compiled(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    pipeline, platform = yaml.safe_load_all(compile_pipeline(tmp_path / "pipeline.yaml").read_text())
    return pipeline, platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]


def test_only_the_train_task_asks_for_a_gpu_through_the_queue(tmp_path: Path) -> None:
    pipeline, kubernetes = _compiled(tmp_path)
    executors = pipeline["deploymentSpec"]["executors"]
    assert executors["exec-train"]["container"]["resources"]["accelerator"] == {
        "type": "nvidia.com/gpu", "resourceType": "nvidia.com/gpu", "count": "1", "resourceCount": "1"}
    assert [name for name, executor in executors.items() if "resources" in executor["container"]] == ["exec-train"]
    assert list(kubernetes) == ["exec-train"]
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
