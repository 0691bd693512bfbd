"""Kubeflow Pipelines: the steps as plain functions, their KFP components, the pipeline, a local runner."""
