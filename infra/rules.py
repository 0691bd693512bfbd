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


def main(argv: list[str]) -> int:
    fresh = render()
    if "--check" in argv:
        if not RULES_MANIFEST.exists() or RULES_MANIFEST.read_text() != fresh:
            print(f"{RULES_MANIFEST} is stale: run `make infra-rules`", file=sys.stderr)
            return 1
        return 0
    RULES_MANIFEST.parent.mkdir(parents=True, exist_ok=True)
    RULES_MANIFEST.write_text(fresh)
    print(f"wrote {RULES_MANIFEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
