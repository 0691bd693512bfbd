"""Policies for distributed training and priorities over a built manifest set.

- A distributed job (TrainJob, Volcano Job) runs the training entry point
  ``torchrun --nnodes=N --nproc_per_node=G -m pipelines.training.entry --data-dir D --out-dir O
  --checkpoint-dir C`` with N and G equal to the nodes and GPUs per node it asks for, starts all
  nodes or none (Volcano: minAvailable = replicas), mounts D, O and C from a shared volume on every
  pod, and gives the SIGTERM checkpoint at least MIN_GRACE_SECONDS.
- Priorities: production inference 1000 and preempting, batch training 100, research lowest and
  never preempting; Kueue's WorkloadPriorityClasses have the same names and values.
"""

from __future__ import annotations

from typing import Any

from infra.manifests import object_id
from infra.pods import Obj, PodTemplate, pod_templates

ENTRY_MODULE = "pipelines.training.entry"
DIR_FLAGS = ("--data-dir", "--out-dir", "--checkpoint-dir")
MIN_GRACE_SECONDS = 120
EXPECTED_PRIORITIES = {"production-inference": 1000, "batch-training": 100}


def _flag(command: list[str], name: str) -> str | None:
    for index, token in enumerate(command):
        if token.startswith(f"{name}="):
            return token.split("=", 1)[1]
        if token == name and index + 1 < len(command):
            return command[index + 1]
    return None


def _shared_mounts(pod: PodTemplate, container: Obj) -> list[str]:
    claims = {volume["name"] for volume in pod.spec.get("volumes", []) if "persistentVolumeClaim" in volume}
    return [mount["mountPath"] for mount in container.get("volumeMounts", []) if mount["name"] in claims]


def _check_command(job: str, command: list[str], nodes: int, procs: int | None, gpus: int) -> list[str]:
    problems = []
    if not command or command[0] != "torchrun" or ENTRY_MODULE not in command:
        return [f"{job}: command is not `torchrun ... -m {ENTRY_MODULE}`: {command}"]
    if _flag(command, "--nnodes") != str(nodes):
        problems.append(f"{job}: torchrun --nnodes={_flag(command, '--nnodes')} but the job has {nodes} nodes")
    if _flag(command, "--nproc_per_node") != str(gpus) or (procs is not None and procs != gpus):
        problems.append(f"{job}: torchrun --nproc_per_node={_flag(command, '--nproc_per_node')} "
                        f"does not match {gpus} GPUs per node")
    problems += [f"{job}: no {flag}" for flag in DIR_FLAGS if _flag(command, flag) is None]
    return problems


def _check_pods(job: str, command: list[str], pods: list[PodTemplate], container_name: str) -> list[str]:
    problems = []
    for pod in pods:
        grace = pod.spec.get("terminationGracePeriodSeconds", 30)
        if grace < MIN_GRACE_SECONDS:
            problems.append(f"{pod.where}: terminationGracePeriodSeconds {grace} < {MIN_GRACE_SECONDS} "
                            "(the SIGTERM checkpoint needs time)")
        container: Obj = next((c for c in pod.spec.get("containers", []) if c.get("name") == container_name), {})
        mounts = _shared_mounts(pod, container)
        for flag in DIR_FLAGS:
            path = _flag(command, flag) or ""
            if not any(path.startswith(mount.rstrip("/") + "/") for mount in mounts):
                problems.append(f"{pod.where}: {flag} {path} is not on a shared volume (mounts: {mounts})")
    if not pods:
        problems.append(f"{job}: no pod template found")
    return problems


def _gpus_per_node(resources: dict[str, Any]) -> int:
    return max(int(resources.get(section, {}).get("nvidia.com/gpu", 0)) for section in ("requests", "limits"))


def distributed_training_is_gang_and_resumable(objects: list[Obj]) -> list[str]:
    problems: list[str] = []
    pods = list(pod_templates(objects))
    for obj in objects:
        job = object_id(obj)
        owned = [pod for pod in pods if pod.owner is obj]
        if obj.get("kind") == "TrainJob":
            trainer = obj["spec"].get("trainer", {})
            command = trainer.get("command", []) + trainer.get("args", [])
            gpus = _gpus_per_node(trainer.get("resourcesPerNode", {}))
            problems += _check_command(job, command, trainer.get("numNodes", 1), trainer.get("numProcPerNode"), gpus)
            problems += _check_pods(job, command, owned, "node")
        elif str(obj.get("apiVersion", "")).startswith("batch.volcano.sh/") and obj.get("kind") == "Job":
            tasks = obj["spec"].get("tasks", [])
            replicas = sum(task.get("replicas", 1) for task in tasks)
            if obj["spec"].get("minAvailable") != replicas:
                problems.append(f"{job}: minAvailable {obj['spec'].get('minAvailable')} != {replicas} replicas "
                                "(the gang must start whole)")
            for task in tasks:
                container = task["template"]["spec"]["containers"][0]
                command = container.get("command", []) + container.get("args", [])
                problems += _check_command(job, command, replicas, None, _gpus_per_node(container.get("resources", {})))
                problems += _check_pods(job, command, owned, container["name"])
    return problems


def priorities_are_ordered(objects: list[Obj]) -> list[str]:
    problems = []
    classes = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "PriorityClass"}
    for name, value in EXPECTED_PRIORITIES.items():
        if classes.get(name, {}).get("value") != value:
            problems.append(f"PriorityClass {name} must have value {value}")
    inference_policy = classes.get("production-inference", {}).get("preemptionPolicy", "PreemptLowerPriority")
    if inference_policy != "PreemptLowerPriority":
        problems.append("PriorityClass production-inference must preempt lower priorities")
    research = classes.get("research", {})
    if research.get("preemptionPolicy") != "Never" or research.get("value", 0) >= min(
            [c["value"] for n, c in classes.items() if n != "research"], default=0):
        problems.append("PriorityClass research must be the lowest and never preempt")
    workload_classes = {o["metadata"]["name"]: o["value"] for o in objects if o.get("kind") == "WorkloadPriorityClass"}
    pod_classes = {name: c["value"] for name, c in classes.items()}
    if workload_classes != pod_classes:
        problems.append(f"Kueue WorkloadPriorityClasses {workload_classes} differ from PriorityClasses {pod_classes}")
    return problems
