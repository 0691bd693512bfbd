"""Where the pods of a built manifest set come from: every pod template, with what schedules it.

A TrainJob has no pod template of its own: its pods are its runtime's template with the
TrainJob's per-node resources put on the trainer container ("node"), so that is what it yields.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from infra.manifests import object_id

GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
TRAINER_CONTAINER = "node"

Obj = dict[str, Any]


@dataclass(frozen=True)
class PodTemplate:
    """One pod template and the object that owns it (whose labels Kueue reads)."""

    where: str
    owner: Obj
    template: Obj

    @property
    def spec(self) -> Obj:
        spec: Obj = self.template.get("spec", {})
        return spec

    @property
    def namespace(self) -> str | None:
        namespace: str | None = self.owner.get("metadata", {}).get("namespace")
        return namespace

    @property
    def labels(self) -> dict[str, str]:
        """Pod labels over owner labels: Kueue reads the queue name from either."""
        return {**self.owner.get("metadata", {}).get("labels", {}),
                **self.template.get("metadata", {}).get("labels", {})}

    @property
    def containers(self) -> list[Obj]:
        containers: list[Obj] = self.spec.get("containers", []) + self.spec.get("initContainers", [])
        return containers

    @property
    def gpu_resources(self) -> dict[str, int]:
        """GPU and MIG resources the pod asks for (requests or limits, whichever is larger)."""
        found: dict[str, int] = {}
        for container in self.containers:
            resources = container.get("resources", {})
            for section in ("requests", "limits"):
                for name, amount in resources.get(section, {}).items():
                    if name.startswith(GPU_RESOURCE_PREFIXES):
                        found[name] = max(found.get(name, 0), int(amount))
        return found

    @property
    def tolerates_gpu_taint(self) -> bool:
        return any(tolerates_gpu_taint(toleration) for toleration in self.spec.get("tolerations", []))

    @property
    def scheduler(self) -> str:
        name: str = self.spec.get("schedulerName") or self.owner.get("spec", {}).get("schedulerName") or ""
        return name or "default-scheduler"


def tolerates_gpu_taint(toleration: Obj) -> bool:
    """True when the toleration matches the taint nvidia.com/gpu=true:NoSchedule."""
    if toleration.get("effect") not in (None, "", "NoSchedule"):
        return False
    if toleration.get("operator") == "Exists":
        return toleration.get("key") in (None, "", GPU_TAINT_KEY)
    return toleration.get("key") == GPU_TAINT_KEY and toleration.get("value") == "true"


def _runtime_pods(obj: Obj) -> Iterator[tuple[str, Obj]]:
    for job in obj.get("spec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", []):
        yield f"replicatedJobs[{job['name']}]", job.get("template", {}).get("spec", {}).get("template", {})


def _trainjob_pods(obj: Obj, objects: list[Obj]) -> Iterator[tuple[str, Obj]]:
    ref = obj.get("spec", {}).get("runtimeRef", {})
    runtime_kind = ref.get("kind", "ClusterTrainingRuntime")
    namespace = obj.get("metadata", {}).get("namespace")
    runtime = next((o for o in objects if o.get("kind") == runtime_kind
                    and o["metadata"]["name"] == ref.get("name")
                    and (runtime_kind == "ClusterTrainingRuntime" or o["metadata"].get("namespace") == namespace)),
                   None)
    if runtime is None:
        yield f"runtime {runtime_kind}/{ref.get('name')} (missing)", {}
        return
    trainer = obj.get("spec", {}).get("trainer", {})
    for where, template in _runtime_pods(runtime):
        pod = copy.deepcopy(template)
        for container in pod.get("spec", {}).get("containers", []):
            if container.get("name") == TRAINER_CONTAINER and "resourcesPerNode" in trainer:
                container["resources"] = trainer["resourcesPerNode"]
            if container.get("name") == TRAINER_CONTAINER and "env" in trainer:
                container["env"] = [*container.get("env", []), *trainer["env"]]
        yield f"{object_id(runtime)} {where}", pod


def pod_templates(objects: list[Obj]) -> Iterator[PodTemplate]:
    """Every pod template in the objects, including TrainJobs' effective pods.

    Training runtimes are not workloads by themselves: their pods are checked through each TrainJob.
    """
    for obj in objects:
        kind, spec, owner = obj.get("kind"), obj.get("spec", {}), object_id(obj)
        if str(obj.get("apiVersion", "")).startswith("batch.volcano.sh/"):
            for task in spec.get("tasks", []):
                yield PodTemplate(f"{owner} task {task.get('name')}", obj, task.get("template", {}))
        elif kind in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}:
            yield PodTemplate(owner, obj, spec.get("template", {}))
        elif kind == "CronJob":
            yield PodTemplate(owner, obj, spec.get("jobTemplate", {}).get("spec", {}).get("template", {}))
        elif kind == "Pod":
            yield PodTemplate(owner, obj, {"metadata": obj.get("metadata", {}), "spec": spec})
        elif kind == "JobSet":
            for job in spec.get("replicatedJobs", []):
                yield PodTemplate(f"{owner} {job['name']}", obj, job["template"]["spec"]["template"])
        elif kind == "PyTorchJob":
            for role, replica in spec.get("pytorchReplicaSpecs", {}).items():
                yield PodTemplate(f"{owner} {role}", obj, replica.get("template", {}))
        elif kind == "TrainJob":
            for where, template in _trainjob_pods(obj, objects):
                yield PodTemplate(f"{owner} via {where}", obj, template)
