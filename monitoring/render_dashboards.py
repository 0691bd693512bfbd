"""Draws each Grafana dashboard as a PNG from a real Prometheus' answers to its panels' queries
(Grafana itself is not installable everywhere; these pictures go into docs/monitoring.md):
``python -m monitoring.render_dashboards --prometheus http://127.0.0.1:9090 --out docs/dashboards``."""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

import httpx

from monitoring.dashboards import DASHBOARD_DIR

_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def query_range(prometheus: str, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
    response = httpx.get(f"{prometheus}/api/v1/query_range",
                         params={"query": expr, "start": start, "end": end, "step": step}, timeout=30)
    response.raise_for_status()
    result: list[dict[str, Any]] = response.json()["data"]["result"]
    return result


def legend(template: str, labels: dict[str, str]) -> str:
    return _LABEL.sub(lambda m: labels.get(m.group(1), ""), template) or "value"


def render(dashboard: Path, prometheus: str, out: Path, start: float, end: float, step: float = 5.0) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = json.loads(dashboard.read_text())
    panels = spec["panels"]
    rows = (len(panels) + 1) // 2
    figure, axes = plt.subplots(rows, 2, figsize=(13, 3.0 * rows), squeeze=False)
    for axis, panel in zip(axes.flat, panels, strict=False):
        axis.set_title(panel["title"], fontsize=10)
        drawn = 0
        for target in panel["targets"]:
            for series in query_range(prometheus, target["expr"], start, end, step):
                times = [float(t) - start for t, _ in series["values"]]
                axis.plot(times, [float(v) for _, v in series["values"]],
                          label=legend(target["legendFormat"], series["metric"]))
                drawn += 1
        if drawn:
            axis.legend(fontsize=6, ncol=2, loc="upper left")
            axis.set_xlabel("seconds", fontsize=7)
        else:
            axis.text(0.5, 0.5, "no data in this run", ha="center", va="center", transform=axis.transAxes)
        axis.tick_params(labelsize=7)
    for axis in list(axes.flat)[len(panels):]:
        axis.axis("off")
    figure.suptitle(spec["title"])
    figure.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dashboard.stem}.png"
    figure.savefig(path, dpi=70)
    plt.close(figure)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prometheus", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--minutes", type=float, default=10.0)
    args = parser.parse_args()
    end = time.time()
    for dashboard in sorted(DASHBOARD_DIR.glob("*.json")):
        print(render(dashboard, args.prometheus, args.out, end - 60 * args.minutes, end))


if __name__ == "__main__":
    main()
