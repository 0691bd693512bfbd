"""Platform policies over a built manifest set. Each check returns violations as readable lines;
an empty list means the manifests keep the policy.

- GPU pods tolerate the GPU taint, carry a PriorityClass that exists, and are admitted through a
  Kueue LocalQueue of their namespace or scheduled by Volcano into a Volcano Queue that exists.
- Pods without a GPU request never tolerate the GPU taint (CPU work stays off GPU nodes).
- Every team namespace has a ResourceQuota covering GPUs and MIG slices, a LimitRange and a LocalQueue.
- Every Deployment has readiness and liveness probes and CPU/memory requests on each container,
  and a PodDisruptionBudget selecting its pods.
- No secret value is inline: no Secret carries data, secret-looking variables come from
  secretKeyRef, and no value anywhere holds credentials in a URL.
- The prediction service (its image sets MLOPS_DEV_MODE=false) gets MLOPS_ADMIN_TOKEN from a
  required secretKeyRef: without it the pod would refuse to start.
- Distributed training and priorities: see infra.training_policy.
- Servers' authentication and clients' credentials: see infra.auth_policy.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from infra.auth_policy import (
    is_secret_file,
    servers_authenticate_and_clients_use_secrets,
    serving_user_follows_its_secret,
)
from infra.manifests import object_id
from infra.pods import GPU_TAINT_KEY, Obj, PodTemplate, pod_templates
from infra.training_policy import distributed_training_is_gang_and_resumable, priorities_are_ordered

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
TEAM_LABEL = "platform.mlops/team"
REQUIRED_QUOTA = ("requests.nvidia.com/gpu", "requests.nvidia.com/mig-1g.10gb", "requests.nvidia.com/mig-3g.40gb")
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL|API_KEY", re.IGNORECASE)
CREDENTIALS_IN_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.IGNORECASE)


def _of_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [obj for obj in objects if obj.get("kind") == kind]


def _names(objects: list[Obj], kind: str, namespace: str | None = None) -> set[str]:
    return {obj["metadata"]["name"] for obj in _of_kind(objects, kind)
            if namespace is None or obj["metadata"].get("namespace") == namespace}


def gpu_pods_are_scheduled_as_gpu_work(objects: list[Obj]) -> list[str]:
    priority_classes = _names(objects, "PriorityClass")
    volcano_queues = _names(objects, "Queue")
    problems = []
    for pod in pod_templates(objects):
        if not pod.gpu_resources:
            continue
        if not pod.tolerates_gpu_taint:
            problems.append(f"{pod.where}: requests {sorted(pod.gpu_resources)} but does not tolerate "
                            f"{GPU_TAINT_KEY}=true:NoSchedule")
        priority = pod.spec.get("priorityClassName")
        if priority not in priority_classes:
            problems.append(f"{pod.where}: GPU pod without an existing PriorityClass (has {priority!r})")
        queue = pod.labels.get(QUEUE_LABEL)
        if pod.scheduler == "volcano":
            volcano_queue = pod.owner.get("spec", {}).get("queue")
            if volcano_queue not in volcano_queues:
                problems.append(f"{pod.where}: Volcano job names queue {volcano_queue!r}, which does not exist")
        elif queue is None:
            problems.append(f"{pod.where}: GPU pod without a {QUEUE_LABEL} label and not scheduled by Volcano")
        elif queue not in _names(objects, "LocalQueue", pod.namespace):
            problems.append(f"{pod.where}: LocalQueue {queue!r} does not exist in namespace {pod.namespace!r}")
    return problems


def cpu_pods_stay_off_gpu_nodes(objects: list[Obj]) -> list[str]:
    return [f"{pod.where}: tolerates the GPU taint without requesting a GPU"
            for pod in pod_templates(objects) if not pod.gpu_resources and pod.tolerates_gpu_taint]


def team_namespaces_are_fenced(objects: list[Obj]) -> list[str]:
    problems = []
    teams = [ns["metadata"]["name"] for ns in _of_kind(objects, "Namespace")
             if TEAM_LABEL in ns["metadata"].get("labels", {})]
    if not teams:
        problems.append(f"no team namespace (label {TEAM_LABEL}) in the manifests")
    for team in teams:
        quotas = [q for q in _of_kind(objects, "ResourceQuota") if q["metadata"].get("namespace") == team]
        hard = {key for quota in quotas for key in quota.get("spec", {}).get("hard", {})}
        missing = [key for key in REQUIRED_QUOTA if key not in hard]
        if not quotas or missing:
            problems.append(f"namespace {team}: ResourceQuota missing or without {missing}")
        if not _names(objects, "LimitRange", team):
            problems.append(f"namespace {team}: no LimitRange")
        if not _names(objects, "LocalQueue", team):
            problems.append(f"namespace {team}: no Kueue LocalQueue")
    return problems


def _selects(selector: Obj, labels: dict[str, str]) -> bool:
    match = selector.get("matchLabels", {})
    return bool(match) and all(labels.get(key) == value for key, value in match.items())


def deployments_are_operable(objects: list[Obj]) -> list[str]:
    problems = []
    budgets = _of_kind(objects, "PodDisruptionBudget")
    for deployment in _of_kind(objects, "Deployment"):
        name = object_id(deployment)
        template = deployment["spec"]["template"]
        for container in template["spec"].get("containers", []):
            for probe in ("readinessProbe", "livenessProbe"):
                if probe not in container:
                    problems.append(f"{name} container {container['name']}: no {probe}")
            requests = container.get("resources", {}).get("requests", {})
            if not {"cpu", "memory"} <= set(requests):
                problems.append(f"{name} container {container['name']}: no cpu and memory requests")
        labels = template.get("metadata", {}).get("labels", {})
        namespace = deployment["metadata"].get("namespace")
        if not any(pdb["metadata"].get("namespace") == namespace and _selects(pdb["spec"].get("selector", {}), labels)
                   for pdb in budgets):
            problems.append(f"{name}: no PodDisruptionBudget selects its pods")
    return problems


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _strings(sub, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            yield from _strings(sub, f"{path}[{index}]")
    elif isinstance(value, str):
        yield path, value


def no_inline_secrets(objects: list[Obj]) -> list[str]:
    problems = [f"{object_id(secret)}: Secret with inline data (create it out of band or with an "
                "external secret operator)" for secret in _of_kind(objects, "Secret")
                if secret.get("data") or secret.get("stringData")]
    for pod in pod_templates(objects):
        for container in pod.containers:
            for variable in container.get("env", []):
                if (SECRET_NAME.search(variable["name"]) and "value" in variable
                        and not (variable["name"].endswith("_FILE") and is_secret_file(pod, container, variable))):
                    problems.append(f"{pod.where} container {container['name']}: {variable['name']} is inline; "
                                    "use valueFrom.secretKeyRef")
    for obj in objects:
        for path, text in _strings(obj):
            if CREDENTIALS_IN_URL.search(text):
                problems.append(f"{object_id(obj)}: {path} holds credentials in a URL")
    return problems


SERVING_IMAGE = "mlops-serving"
ADMIN_TOKEN = "MLOPS_ADMIN_TOKEN"


def services_get_their_admin_token_from_a_secret(objects: list[Obj]) -> list[str]:
    problems = []
    for pod in pod_templates(objects):
        for container in pod.containers:
            if SERVING_IMAGE not in container.get("image", "").rsplit("/", 1)[-1]:
                continue
            ref = next((v.get("valueFrom", {}).get("secretKeyRef") for v in container.get("env", [])
                        if v["name"] == ADMIN_TOKEN), None)
            if not ref or ref.get("optional") or not ref.get("name") or not ref.get("key"):
                problems.append(f"{pod.where} container {container['name']}: {ADMIN_TOKEN} must come from a "
                                "required secretKeyRef (the service refuses to start without it)")
    return problems


POLICIES: dict[str, Callable[[list[Obj]], list[str]]] = {
    "GPU pods tolerate the taint, have a priority and a queue": gpu_pods_are_scheduled_as_gpu_work,
    "CPU pods never tolerate the GPU taint": cpu_pods_stay_off_gpu_nodes,
    "team namespaces have quota, limits and a LocalQueue": team_namespaces_are_fenced,
    "Deployments have probes, requests and a PDB": deployments_are_operable,
    "no inline secret values": no_inline_secrets,
    "the prediction service's admin token comes from a Secret": services_get_their_admin_token_from_a_secret,
    "servers authenticate, clients' credentials come from Secrets": servers_authenticate_and_clients_use_secrets,
    "a rotated serving password reaches MLflow": serving_user_follows_its_secret,
    "distributed training runs whole and resumes": distributed_training_is_gang_and_resumable,
    "priorities are ordered": priorities_are_ordered,
}


def violations(objects: list[Obj]) -> list[str]:
    return [f"[{title}] {problem}" for title, check in POLICIES.items() for problem in check(objects)]


def gpu_pods(objects: list[Obj]) -> list[PodTemplate]:
    return [pod for pod in pod_templates(objects) if pod.gpu_resources]
