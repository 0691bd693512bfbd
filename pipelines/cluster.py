"""Kubernetes settings of pipeline tasks on a GPU cluster (kfp-kubernetes), kept apart from the
pipeline's shape. On Kubeflow the train task lands on a GPU node through the platform's
conventions (infra/README.md): GPU resource and product, the GPU taint's toleration, and a Kueue
LocalQueue that admits it against the team's quota. Every task talks to the platform's MLflow (each
step logs into the pipeline's run), so every task gets the server's address from the ConfigMap
``pipeline-config`` and the pipeline's MLflow account from the Secret ``mlflow-admin`` of the
pipeline's namespace, as environment variables the pod's spec names (never a value in the compiled
pipeline). No task talks to Redis: preprocess leaves the online store alone. kfp.local ignores all
of it (its tasks get the runner's settings record).
"""

from __future__ import annotations

from kfp import kubernetes
from kfp.dsl import PipelineTask

GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"

# The fraud team's namespace is its Kubeflow profile; its LocalQueue is infra/base/teams/team-fraud.yaml.
TRAIN_QUEUE = "fraud"
TRAIN_PRIORITY = "batch-training"
TRAIN_GPU_PRODUCT = "NVIDIA-A100-SXM4-80GB"
TRAIN_GPUS = 1

# The Kubeflow profile the pipeline runs in, and what it finds there (infra/base/training/pipeline-config.yaml;
# the Secret is created out of band, infra/README.md "Install", step 5, like the TrainJob's).
PIPELINE_NAMESPACE = "team-fraud"
PIPELINE_CONFIG = "pipeline-config"
PIPELINE_CONFIG_ENV = {"MLOPS_TRACKING_URI": "MLOPS_TRACKING_URI"}
TRACKING_SECRET = "mlflow-admin"
TRACKING_SECRET_ENV = {"username": "MLOPS_TRACKING_USERNAME", "password": "MLOPS_TRACKING_PASSWORD"}


def run_on_gpu_queue(task: PipelineTask, *, gpus: int = TRAIN_GPUS, product: str = TRAIN_GPU_PRODUCT,
                     queue: str = TRAIN_QUEUE, priority: str = TRAIN_PRIORITY) -> PipelineTask:
    """Ask for ``gpus`` whole GPUs of ``product``, tolerate the GPU taint, queue through Kueue."""
    task.set_accelerator_type(GPU_RESOURCE).set_accelerator_limit(gpus)
    kubernetes.add_toleration(task, key=GPU_TAINT["key"], operator="Equal", value=GPU_TAINT["value"],
                              effect="NoSchedule")
    kubernetes.add_node_selector(task, GPU_PRODUCT_LABEL, product)
    kubernetes.add_pod_label(task, QUEUE_LABEL, queue)
    kubernetes.add_pod_label(task, PRIORITY_LABEL, priority)
    return task


def use_platform_mlflow(task: PipelineTask, *, secret: str = TRACKING_SECRET) -> PipelineTask:
    """The task's MLflow server from ``pipeline-config`` and its user and password from ``secret``."""
    kubernetes.use_config_map_as_env(task, PIPELINE_CONFIG, PIPELINE_CONFIG_ENV)
    kubernetes.use_secret_as_env(task, secret, TRACKING_SECRET_ENV)
    return task
