"""The production-shaped stack on one host without Docker: MLflow on PostgreSQL, Redis, Prometheus, the service."""
