"""Offline checks of the Kubernetes manifests in infra/: build, schemas, policies, Kueue admission model."""
