"""Generates the PrometheusRule manifest from monitoring/prometheus/alerts.yml, the one source of
truth for alert rules. ``python -m infra.rules`` (``make infra-rules``) rewrites
infra/base/monitoring/prometheus-rules.yaml; ``--check`` fails when that file is stale."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from infra.manifests import INFRA_DIR, REPO_ROOT

ALERTS_FILE = REPO_ROOT / "monitoring" / "prometheus" / "alerts.yml"
RULES_MANIFEST = INFRA_DIR / "base" / "monitoring" / "prometheus-rules.yaml"
HEADER = ("# Generated from monitoring/prometheus/alerts.yml by `make infra-rules`; edit that file, "
          "not this one.\n")


def prometheus_rule(alerts: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "mlops-alerts", "namespace": "mlops", "labels": {"release": "prometheus"}},
        "spec": {"groups": alerts["groups"]},
    }


def render(alerts_file: Path = ALERTS_FILE) -> str:
    alerts = yaml.safe_load(alerts_file.read_text())
    return HEADER + yaml.safe_dump(prometheus_rule(alerts), sort_keys=False, width=120)


def main(argv: list[str], *, alerts_file: Path = ALERTS_FILE, manifest: Path = RULES_MANIFEST) -> int:
    fresh = render(alerts_file)
    if "--check" in argv:
        if not manifest.exists() or manifest.read_text() != fresh:
            print(f"{manifest} is stale: run `make infra-rules`", file=sys.stderr)
            return 1
        return 0
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(fresh)
    print(f"wrote {manifest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
