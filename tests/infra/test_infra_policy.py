"""The platform policies hold on every overlay, and each one catches the mistake it
exists for (one deliberate change to the prod overlay per case)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from infra.manifests import OVERLAYS
from infra.manifests import find_object as find
from infra.policy import gpu_pods, violations

pytestmark = pytest.mark.integration

Objects = list[dict[str, Any]]
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_keeps_every_policy(built: dict[str, Objects], overlay: str) -> None:
    assert violations(built[overlay]) == []
    # The checks saw the GPU work: the TrainJob's pods (Kueue) or the Volcano job's.
    assert [pod.scheduler for pod in gpu_pods(built[overlay])] == (
        ["volcano"] if overlay == "volcano" else ["default-scheduler"])


def _runtime_pod(objects: Objects) -> dict[str, Any]:
    runtime = find(objects, "ClusterTrainingRuntime", "torch-distributed-gpu")
    job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    spec: dict[str, Any] = job["template"]["spec"]["template"]["spec"]
    return spec


def _serving_pod(objects: Objects) -> dict[str, Any]:
    spec: dict[str, Any] = find(objects, "Deployment", "prediction-service")["spec"]["template"]["spec"]
    return spec


def _mlflow_pod(objects: Objects) -> dict[str, Any]:
    spec: dict[str, Any] = find(objects, "Deployment", "mlflow")["spec"]["template"]["spec"]
    return spec


def _redis_container(objects: Objects) -> dict[str, Any]:
    container: dict[str, Any] = find(objects, "StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0]
    return container


def _serving_user_sync_pod(objects: Objects) -> dict[str, Any]:
    cronjob = find(objects, "CronJob", "mlflow-serving-user-sync")
    spec: dict[str, Any] = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return spec


def _literal_admin_password(objects: Objects) -> None:
    container = _serving_user_sync_pod(objects)["containers"][0]
    container["env"] = [v for v in container["env"] if v["name"] != "MLFLOW_TRACKING_PASSWORD_FILE"]
    container["env"].append({"name": "MLFLOW_TRACKING_PASSWORD", "value": "hunter2"})


def _trainjob(objects: Objects) -> dict[str, Any]:
    return find(objects, "TrainJob", "fraud-distributed")


def _drop(objects: Objects, kind: str, name: str, namespace: str | None = None) -> None:
    objects[:] = [o for o in objects if not (o["kind"] == kind and o["metadata"]["name"] == name
                                             and o["metadata"].get("namespace", namespace) == namespace)]


def _add_secret(objects: Objects) -> None:
    objects.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "mlops"},
                    "stringData": {"password": "hunter2"}})


CASES: dict[str, tuple[Callable[[Objects], Any], str]] = {
    "GPU pod without the toleration": (
        lambda o: _runtime_pod(o).pop("tolerations"), "does not tolerate nvidia.com/gpu=true:NoSchedule"),
    "GPU pod without a priority": (
        lambda o: _runtime_pod(o).pop("priorityClassName"), "GPU pod without an existing PriorityClass"),
    "GPU pod without a queue": (
        lambda o: _trainjob(o)["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name"),
        "without a kueue.x-k8s.io/queue-name label"),
    "GPU pod naming a queue of another namespace": (
        lambda o: _trainjob(o)["metadata"]["labels"].update({"kueue.x-k8s.io/queue-name": "vision"}),
        "LocalQueue 'vision' does not exist in namespace 'team-fraud'"),
    "CPU pod tolerating the GPU taint": (
        lambda o: _serving_pod(o).update(tolerations=[GPU_TOLERATION]),
        "Deployment/mlops/prediction-service: tolerates the GPU taint without requesting a GPU"),
    "CPU pod tolerating every taint": (
        lambda o: _serving_pod(o).update(tolerations=[{"operator": "Exists"}]),
        "tolerates the GPU taint without requesting a GPU"),
    "team without a LocalQueue": (
        lambda o: _drop(o, "LocalQueue", "vision", "team-vision"), "namespace team-vision: no Kueue LocalQueue"),
    "team quota without MIG slices": (
        lambda o: find(o, "ResourceQuota", "compute")["spec"]["hard"].pop("requests.nvidia.com/mig-1g.10gb"),
        "ResourceQuota missing or without ['requests.nvidia.com/mig-1g.10gb']"),
    "Deployment without a liveness probe": (
        lambda o: _serving_pod(o)["containers"][0].pop("livenessProbe"), "container server: no livenessProbe"),
    "Deployment without requests": (
        lambda o: _serving_pod(o)["containers"][0]["resources"].pop("requests"), "no cpu and memory requests"),
    "Deployment without a PDB": (
        lambda o: _drop(o, "PodDisruptionBudget", "mlflow", "mlops"),
        "Deployment/mlops/mlflow: no PodDisruptionBudget selects its pods"),
    "inline Secret": (_add_secret, "Secret/mlops/db: Secret with inline data"),
    "inline password variable": (
        lambda o: _serving_pod(o)["containers"][0].update(env=[{"name": "REDIS_PASSWORD", "value": "x"}]),
        "REDIS_PASSWORD is inline"),
    "credentials in a URL": (
        lambda o: find(o, "ConfigMap", "serving-config")["data"].update(
            MLOPS_TRACKING_URI="postgresql://mlflow:s3cret@db:5432/mlflow"),
        "ConfigMap/mlops/serving-config: data.MLOPS_TRACKING_URI holds credentials in a URL"),
    "service without its admin token": (
        lambda o: _serving_pod(o)["containers"][0].pop("env"),
        "container server: MLOPS_ADMIN_TOKEN must come from a required secretKeyRef"),
    "service admin token from an optional Secret": (
        lambda o: _serving_pod(o)["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"].update(optional=True),
        "container server: MLOPS_ADMIN_TOKEN must come from a required secretKeyRef"),
    "MLflow without the basic-auth app": (
        lambda o: _mlflow_pod(o)["containers"][0]["args"].remove("--app-name=basic-auth"),
        "container mlflow: mlflow server without --app-name=basic-auth"),
    "backend store password on the command line": (
        lambda o: _mlflow_pod(o)["containers"][0]["args"].append("--backend-store-uri=$(MLFLOW_BACKEND_STORE_URI)"),
        "container mlflow: $(MLFLOW_BACKEND_STORE_URI) from a Secret in its arguments"),
    "Redis without requirepass": (
        lambda o: _redis_container(o).update(command=["redis-server"], args=["--appendonly", "yes"]),
        "container redis: redis without requirepass read from a mounted Secret"),
    "service without its MLflow password": (
        lambda o: _serving_pod(o)["containers"][0].update(
            env=[v for v in _serving_pod(o)["containers"][0]["env"] if v["name"] != "MLOPS_TRACKING_PASSWORD_FILE"]),
        "container server: talks to MLflow without MLOPS_TRACKING_PASSWORD(_FILE) from a Secret"),
    "Redis password file outside a mounted Secret": (
        lambda o: _serving_pod(o)["volumes"].__setitem__(-1, {"name": "redis-credentials", "emptyDir": {}}),
        "container server: talks to Redis without MLOPS_REDIS_PASSWORD_FILE in a mounted Secret"),
    "serving user never re-set after a rotation": (
        lambda o: _drop(o, "CronJob", "mlflow-serving-user-sync", "mlops"),
        "Job/mlops/mlflow-serving-user: no CronJob mlflow-serving-user-sync re-runs it"),
    "serving user's CronJob runs another pod than its Job": (
        lambda o: _serving_user_sync_pod(o).update(priorityClassName="research"),
        "CronJob/mlops/mlflow-serving-user-sync: its pod spec differs from Job/mlops/mlflow-serving-user's in "
        "['priorityClassName']"),
    "serving user's CronJob with a literal admin password": (
        _literal_admin_password,
        "CronJob/mlops/mlflow-serving-user-sync container create-user: talks to MLflow without "
        "MLFLOW_TRACKING_PASSWORD(_FILE) from a Secret"),
    "training without the MLflow user": (
        lambda o: _trainjob(o)["spec"]["trainer"].update(env=[
            v for v in _trainjob(o)["spec"]["trainer"]["env"] if v["name"] != "MLOPS_TRACKING_USERNAME"]),
        "talks to MLflow without MLOPS_TRACKING_USERNAME from a Secret"),
    "torchrun nodes differ from the job's": (
        lambda o: _trainjob(o)["spec"]["trainer"].update(numNodes=4),
        "torchrun --nnodes=2 but the job has 4 nodes"),
    "checkpoints off the shared volume": (
        lambda o: _trainjob(o)["spec"]["trainer"]["command"].__setitem__(-1, "/tmp/checkpoints"),
        "--checkpoint-dir /tmp/checkpoints is not on a shared volume"),
    "grace period too short for the checkpoint": (
        lambda o: _runtime_pod(o).update(terminationGracePeriodSeconds=30), "terminationGracePeriodSeconds 30 < 120"),
    "research allowed to preempt": (
        lambda o: find(o, "PriorityClass", "research").update(preemptionPolicy="PreemptLowerPriority"),
        "research must be the lowest and never preempt"),
    "Kueue priorities out of step": (
        lambda o: find(o, "WorkloadPriorityClass", "batch-training").update(value=500),
        "WorkloadPriorityClasses"),
}


@pytest.mark.parametrize("case", CASES)
def test_each_policy_catches_its_mistake(prod: Objects, case: str) -> None:
    change, expected = CASES[case]
    change(prod)
    found = violations(prod)
    assert any(expected in problem for problem in found), found


def test_the_volcano_gang_must_start_whole(built: dict[str, Objects]) -> None:
    objects = [dict(o) for o in built["volcano"]]
    job = next(o for o in objects if o["apiVersion"].startswith("batch.volcano.sh") and o["kind"] == "Job")
    job["spec"] = {**job["spec"], "minAvailable": 1}
    assert any("minAvailable 1 != 2 replicas" in problem for problem in violations(objects))

