"""What the native stack runs: the Debian server binaries, and Prometheus' configuration.

The scrape configuration is the platform's own (monitoring/prometheus/prometheus.yml, the one the
docker-compose file mounts) with this host's ports: the prediction service and the Pushgateway,
the same alert rules. Jobs for what does not run here (the DCGM exporter of GPU nodes) are left out.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from mlops.errors import StackError
from native_stack.settings import StackSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = REPO_ROOT / "monitoring" / "prometheus"
# Debian installs PostgreSQL's server programs outside PATH, one folder per major version.
POSTGRES_BIN_GLOB = "/usr/lib/postgresql/*/bin"
_PACKAGES = {"initdb": "postgresql", "postgres": "postgresql", "psql": "postgresql-client",
             "redis-server": "redis-server", "prometheus": "prometheus",
             "prometheus-pushgateway": "prometheus-pushgateway"}
_SCRAPED = {"prediction-service": "serving", "pushgateway": "pushgateway"}


def server_binary(name: str) -> str:
    """The path of a server program; StackError naming the Debian package when it is missing."""
    if name in ("initdb", "postgres", "psql"):
        versions = sorted(Path("/").glob(POSTGRES_BIN_GLOB.lstrip("/")), key=lambda p: int(p.parent.name),
                          reverse=True)
        for folder in versions:
            if (folder / name).is_file():
                return str(folder / name)
    found = shutil.which(name)
    if found is None:
        raise StackError(f"{name} is not installed: apt-get install -y {_PACKAGES.get(name, name)}")
    return found


def prometheus_config(settings: StackSettings, ports: Mapping[str, int]) -> str:
    """prometheus.yml for this stack: the platform's jobs pointed at the stack's ports."""
    config: dict[str, Any] = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    interval = f"{settings.stack_scrape_interval_s:g}s"
    config["global"] = {"scrape_interval": interval, "evaluation_interval": interval}
    config["rule_files"] = [str(PROMETHEUS_DIR / name) for name in config.get("rule_files", [])]
    jobs = []
    for job in config["scrape_configs"]:
        service = _SCRAPED.get(job["job_name"])
        if service is not None:
            jobs.append({**job, "static_configs": [{"targets": [f"127.0.0.1:{ports[service]}"]}]})
    config["scrape_configs"] = jobs
    return yaml.safe_dump(config, sort_keys=False)
