"""The cluster's deployment descriptions checked offline: the Kubernetes manifests in infra/ (build,
schemas, policies, Kueue admission model) and docker-compose.yml (compose.py: a deployment description
like the manifests, so its check lives beside theirs; the processes it runs are not started here)."""
