"""Policies on the platform's servers' authentication and their clients' credentials.

- The MLflow server runs the basic-auth app (`--app-name=basic-auth`) with its admin's password
  from a Secret; Redis requires a password (`requirepass`) read from a mounted Secret, and its
  probe's redis-cli gets it from a Secret too.
- Every container that talks to the platform's MLflow (MLOPS_/MLFLOW_TRACKING_URI naming the mlflow
  Service, set or from a ConfigMap) gets the tracking user from a secretKeyRef and the password from a
  secretKeyRef or a *_FILE inside a mounted Secret; every container given MLOPS_REDIS_URL gets
  MLOPS_REDIS_PASSWORD_FILE inside a mounted Secret.
- No argument expands a variable that comes from a Secret: `$(VAR)` in args would put the value on
  the process's command line.
- The Job that creates the prediction service's MLflow user (mlflow-serving-user) has a CronJob
  (mlflow-serving-user-sync) running exactly its pod spec, so a rotated `mlflow-serving` password
  reaches MLflow without anyone re-running the Job.
"""

from __future__ import annotations

import re
from typing import Any

from infra.pods import Obj, PodTemplate, pod_templates

MLFLOW_SERVICE = re.compile(r"//mlflow(\.mlops(\.svc)?)?(:\d+)?(/|$)")
REDIS_SERVICE = re.compile(r"//([^@/]*@)?redis(\.mlops(\.svc)?)?(:\d+)?(/|$)")


def secret_mounts(pod: PodTemplate, container: Obj) -> list[str]:
    """The container's mount paths of Secret volumes (plain or projected)."""
    secret_volumes = {volume["name"] for volume in pod.spec.get("volumes", [])
                      if "secret" in volume or any("secret" in source
                                                   for source in volume.get("projected", {}).get("sources", []))}
    return [mount["mountPath"].rstrip("/") for mount in container.get("volumeMounts", [])
            if mount["name"] in secret_volumes]


def is_secret_file(pod: PodTemplate, container: Obj, variable: Obj) -> bool:
    """A literal path inside one of the container's mounted Secrets."""
    path = variable.get("value")
    return isinstance(path, str) and any(path.startswith(mount + "/") for mount in secret_mounts(pod, container))


def _from_secret(variable: Obj | None) -> bool:
    return bool(variable and variable.get("valueFrom", {}).get("secretKeyRef"))


def environment(objects: list[Obj], pod: PodTemplate, container: Obj) -> dict[str, Obj]:
    """The container's variables by name: envFrom ConfigMaps of the same namespace first, env over them;
    a configMapKeyRef to a ConfigMap of the namespace becomes the value it names."""
    config_maps = {(obj["metadata"].get("namespace"), obj["metadata"]["name"]): obj.get("data", {})
                   for obj in objects if obj.get("kind") == "ConfigMap"}
    found: dict[str, Obj] = {}
    for source in container.get("envFrom", []):
        ref = source.get("configMapRef")
        if ref:
            data = config_maps.get((pod.namespace, ref["name"]), {})
            found.update({name: {"name": name, "value": value} for name, value in data.items()})
    for variable in container.get("env", []):
        ref = variable.get("valueFrom", {}).get("configMapKeyRef")
        value = config_maps.get((pod.namespace, ref["name"]), {}).get(ref["key"]) if ref else None
        found[variable["name"]] = {"name": variable["name"], "value": value} if value is not None else variable
    return found


def _value(variable: Obj | None) -> str:
    value: Any = (variable or {}).get("value")
    return value if isinstance(value, str) else ""


def _is_mlflow_server(container: Obj) -> bool:
    return bool(container.get("command", [])[:2] == ["mlflow", "server"])


def _is_redis_server(container: Obj) -> bool:
    return str(container.get("image", "")).rsplit("/", 1)[-1].startswith("redis:")


def _client_problems(pod: PodTemplate, container: Obj, env: dict[str, Obj]) -> list[str]:
    where, problems = f"{pod.where} container {container['name']}", []
    for prefix in ("MLOPS_", "MLFLOW_"):
        if MLFLOW_SERVICE.search(_value(env.get(f"{prefix}TRACKING_URI"))):
            if not _from_secret(env.get(f"{prefix}TRACKING_USERNAME")):
                problems.append(f"{where}: talks to MLflow without {prefix}TRACKING_USERNAME from a Secret")
            password_file = env.get(f"{prefix}TRACKING_PASSWORD_FILE")
            if not (_from_secret(env.get(f"{prefix}TRACKING_PASSWORD"))
                    or (password_file and is_secret_file(pod, container, password_file))):
                problems.append(f"{where}: talks to MLflow without {prefix}TRACKING_PASSWORD(_FILE) from a Secret")
    if REDIS_SERVICE.search(_value(env.get("MLOPS_REDIS_URL"))):
        password_file = env.get("MLOPS_REDIS_PASSWORD_FILE")
        if not (password_file and is_secret_file(pod, container, password_file)):
            problems.append(f"{where}: talks to Redis without MLOPS_REDIS_PASSWORD_FILE in a mounted Secret")
    return problems


def _server_problems(pod: PodTemplate, container: Obj, env: dict[str, Obj]) -> list[str]:
    where, problems = f"{pod.where} container {container['name']}", []
    argv = [str(part) for part in container.get("command", []) + container.get("args", [])]
    if _is_mlflow_server(container):
        if "--app-name=basic-auth" not in argv:
            problems.append(f"{where}: mlflow server without --app-name=basic-auth")
        if not _from_secret(env.get("MLFLOW_AUTH_ADMIN_PASSWORD")):
            problems.append(f"{where}: MLFLOW_AUTH_ADMIN_PASSWORD must come from a Secret")
    if _is_redis_server(container):
        script = " ".join(argv)
        if "requirepass" not in script or not any(mount + "/" in script for mount in secret_mounts(pod, container)):
            problems.append(f"{where}: redis without requirepass read from a mounted Secret")
        if not _from_secret(env.get("REDISCLI_AUTH")):
            problems.append(f"{where}: REDISCLI_AUTH (the probe's redis-cli) must come from a Secret")
    return problems


def _argument_problems(pod: PodTemplate, container: Obj, env: dict[str, Obj]) -> list[str]:
    argv = " ".join(str(part) for part in container.get("command", []) + container.get("args", []))
    return [f"{pod.where} container {container['name']}: $({name}) from a Secret in its arguments"
            for name in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", argv) if _from_secret(env.get(name))]


SERVING_USER_JOB = "mlflow-serving-user"
SERVING_USER_SYNC = "mlflow-serving-user-sync"


def serving_user_follows_its_secret(objects: list[Obj]) -> list[str]:
    """The serving user's Job and its CronJob run one pod spec (nothing to check without the Job)."""
    pods = {pod.owner.get("kind"): pod for pod in pod_templates(objects)
            if pod.owner.get("metadata", {}).get("name") in (SERVING_USER_JOB, SERVING_USER_SYNC)}
    job, sync = pods.get("Job"), pods.get("CronJob")
    if job is None:
        return []
    if sync is None:
        return [f"{job.where}: no CronJob {SERVING_USER_SYNC} re-runs it, so a rotated password never "
                "reaches MLflow"]
    differing = sorted(key for key in set(job.spec) | set(sync.spec) if job.spec.get(key) != sync.spec.get(key))
    return [f"{sync.where}: its pod spec differs from {job.where}'s in {differing}"] if differing else []


def servers_authenticate_and_clients_use_secrets(objects: list[Obj]) -> list[str]:
    problems = []
    for pod in pod_templates(objects):
        for container in pod.containers:
            env = environment(objects, pod, container)
            problems += _server_problems(pod, container, env)
            problems += _argument_problems(pod, container, env)
            if not (_is_mlflow_server(container) or _is_redis_server(container)):
                problems += _client_problems(pod, container, env)
    return problems
