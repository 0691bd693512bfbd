"""The native stack's settings: the platform's base plus the ports of what no platform code calls."""

from __future__ import annotations

from pydantic import Field

from mlops.settings import Settings


class StackSettings(Settings):
    """The base settings (the stores' URLs, the service's port) and MLflow's PostgreSQL and Prometheus."""

    stack_postgres_port: int = Field(default=5432, ge=1, le=65535, description="MLflow's PostgreSQL.")
    stack_prometheus_port: int = Field(default=9090, ge=1, le=65535)
    stack_scrape_interval_s: float = Field(default=15.0, gt=0, le=300, description="Prometheus scrape interval.")
