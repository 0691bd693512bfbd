"""The compiled training pipeline's tasks under the manifests' authentication rules.

Kubeflow Pipelines starts each task as a pod built from the task's Kubernetes settings in the
compiled pipeline (kfp-kubernetes: ``configMapAsEnv``, ``secretAsEnv``, ``secretAsVolume``, and the
container's literal ``env``). :func:`task_pods` makes those pods here, in the pipeline's namespace,
so the manifests' rules apply to them unchanged (infra/auth_policy.py, and the inline-secret rule of
infra/policy.py), plus two of the pipeline's own:

- every task talks to the platform's MLflow (each step logs into the pipeline's run), so each needs
  MLOPS_TRACKING_URI naming the mlflow Service, and then its user and password from Secrets;
- every Secret key a task reads is one the manifests' pods already read in that namespace (the
  TrainJob's ``mlflow-admin``), so a misspelt or undocumented Secret cannot pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from infra.auth_policy import MLFLOW_SERVICE, environment, servers_authenticate_and_clients_use_secrets
from infra.pods import Obj, pod_templates
from infra.policy import no_inline_secrets
from mlops.errors import ManifestError

TASK_CONTAINER = "main"  # the name KFP's driver gives the task's container


def load_compiled(path: Path) -> tuple[Obj, Obj]:
    """The compiled pipeline (IR YAML) and its Kubernetes settings by executor name."""
    if not path.is_file():
        raise ManifestError(f"compiled pipeline {path} does not exist; run `make compile`")
    documents = [document for document in yaml.safe_load_all(path.read_text()) if document]
    pipeline = documents[0]
    platform = documents[1] if len(documents) > 1 else {}
    executors: Obj = platform.get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {}).get("executors", {})
    return pipeline, executors


def _name(source: Obj, field: str) -> str:
    """The Secret/ConfigMap name a setting names: a constant, or a placeholder for a run-time parameter."""
    parameter = source.get(f"{field}Parameter", {})
    constant = parameter.get("runtimeValue", {}).get("constant")
    if isinstance(constant, str) and constant:
        return constant
    if source.get(field):
        return str(source[field])
    return f"<parameter {parameter.get('componentInputParameter', '?')}>"


def task_pod(executor_name: str, executor: Obj, kubernetes: Obj, namespace: str) -> Obj:
    """The pod KFP starts for one executor, as far as its environment and volumes go."""
    container: Obj = executor.get("container", {})
    env: list[Obj] = [{"name": v["name"], "value": str(v.get("value", ""))} for v in container.get("env", [])]
    for source in kubernetes.get("configMapAsEnv", []):
        ref = {"name": _name(source, "configMapName")}
        env += [{"name": pair["envVar"], "valueFrom": {"configMapKeyRef": {**ref, "key": pair["configMapKey"]}}}
                for pair in source.get("keyToEnv", [])]
    for source in kubernetes.get("secretAsEnv", []):
        ref = {"name": _name(source, "secretName")}
        env += [{"name": pair["envVar"], "valueFrom": {"secretKeyRef": {**ref, "key": pair["secretKey"]}}}
                for pair in source.get("keyToEnv", [])]
    volumes = [{"name": f"secret-{index}", "secret": {"secretName": _name(source, "secretName")}}
               for index, source in enumerate(kubernetes.get("secretAsVolume", []))]
    mounts = [{"name": f"secret-{index}", "mountPath": source["mountPath"]}
              for index, source in enumerate(kubernetes.get("secretAsVolume", []))]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pipeline-task-{executor_name.removeprefix('exec-')}", "namespace": namespace},
            "spec": {"containers": [{"name": TASK_CONTAINER, "image": container.get("image", ""), "env": env,
                                     "volumeMounts": mounts}], "volumes": volumes}}


def task_pods(pipeline: Obj, kubernetes: Obj, namespace: str) -> list[Obj]:
    executors: dict[str, Any] = pipeline.get("deploymentSpec", {}).get("executors", {})
    return [task_pod(name, executor, kubernetes.get(name, {}), namespace) for name, executor in executors.items()]


def _secret_keys_read(objects: list[Obj]) -> set[tuple[str | None, str, str]]:
    """(namespace, Secret, key) of every secretKeyRef in the manifests' pods."""
    found = set()
    for pod in pod_templates(objects):
        for container in pod.containers:
            for variable in container.get("env", []):
                ref = variable.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    found.add((pod.namespace, ref["name"], ref["key"]))
    return found


def task_problems(objects: list[Obj], pods: list[Obj]) -> list[str]:
    """What is wrong with the task pods ``pods`` against the built manifests ``objects``."""
    config_maps = [obj for obj in objects if obj.get("kind") == "ConfigMap"]
    problems = no_inline_secrets(pods) + servers_authenticate_and_clients_use_secrets(config_maps + pods)
    documented = _secret_keys_read(objects)
    for pod in pod_templates(pods):
        container = pod.containers[0]
        uri = environment(config_maps, pod, container).get("MLOPS_TRACKING_URI", {}).get("value")
        if not (isinstance(uri, str) and MLFLOW_SERVICE.search(uri)):
            problems.append(f"{pod.where}: no MLOPS_TRACKING_URI naming the platform's MLflow (every step "
                            "logs into the pipeline's run; the ConfigMap pipeline-config holds it)")
        for variable in container["env"]:
            ref = variable.get("valueFrom", {}).get("secretKeyRef")
            if ref and (pod.namespace, ref["name"], ref["key"]) not in documented:
                problems.append(f"{pod.where}: Secret {ref['name']} key {ref['key']} is not one the manifests "
                                f"read in {pod.namespace} (infra/README.md lists the Secrets to create)")
    return problems


def pipeline_problems(objects: list[Obj], compiled: Path, namespace: str) -> list[str]:
    """Every authentication problem of the compiled pipeline's tasks, run in ``namespace`` next to ``objects``."""
    pipeline, kubernetes = load_compiled(compiled)
    return task_problems(objects, task_pods(pipeline, kubernetes, namespace))
