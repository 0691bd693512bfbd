"""Deleting every tag of an MLflow store: what a run reports must not depend on them (tags are for people)."""

from __future__ import annotations

from mlops import registry
from mlops.settings import Settings


def delete_every_tag(settings: Settings) -> int:
    """Delete every tag of every run, model version and registered model in the store; how many."""
    client = registry.client(settings)
    deleted = 0
    experiments = [e.experiment_id for e in client.search_experiments()]
    for run in client.search_runs(experiments):
        for key in run.data.tags:
            client.delete_tag(run.info.run_id, key)
            deleted += 1
    for model in client.search_registered_models():
        for key in model.tags:
            client.delete_registered_model_tag(model.name, key)
            deleted += 1
        for version in client.search_model_versions(f"name = '{model.name}'"):
            for key in version.tags:
                client.delete_model_version_tag(model.name, version.version, key)
                deleted += 1
    return deleted
