"""``python -m ci_gates [GATE ...]``: run the CI/CD gates in order, one line each; exit 1 if any failed.

    python -m ci_gates                                 # all: lint tests data repro performance latency image
    python -m ci_gates data repro performance latency image
    python -m ci_gates image --without-docker skip
    python -m ci_gates latency --refresh-baseline      # measure and write the baseline (then commit it)

Bad options exit 2 with one line. Settings (MLOPS_HOME, MLOPS_GATE_MIN_F1, ...) come from the
environment as everywhere else.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ci_gates.outcome import GateOutcome, failed
from ci_gates.settings import GateSettings
from mlops.errors import MLOpsError

REPO_ROOT = Path(__file__).resolve().parents[2]
Gate = Callable[[argparse.Namespace, GateSettings], GateOutcome]


def _lint(args: argparse.Namespace, settings: GateSettings) -> GateOutcome:
    from ci_gates.make_targets import make_gate

    return make_gate("lint", "lint", REPO_ROOT, settings.resolved_home / "gates")


def _tests(args: argparse.Namespace, settings: GateSettings) -> GateOutcome:
    from ci_gates.make_targets import make_gate

    return make_gate("tests", "test", REPO_ROOT, settings.resolved_home / "gates")


def _data(args: argparse.Namespace, settings: GateSettings) -> GateOutcome:
    from ci_gates.data import data_gate

    return data_gate(settings, args.data_run)


def _repro(args: argparse.Namespace, settings: GateSettings) -> GateOutcome:
    from ci_gates.reproducibility import reproducibility_gate

    return reproducibility_gate(settings, args.repro_run)


def _performance(args: argparse.Namespace, settings: GateSettings) -> GateOutcome:
    from ci_gates.performance import performance_gate

    return performance_gate(settings, args.candidate)


def _latency(args: argparse.Namespace, settings: GateSettings) -> GateOutcome:
    from ci_gates.latency import latency_gate

    return latency_gate(settings, args.baseline, url=args.url, app=args.app)


def _image(args: argparse.Namespace, settings: GateSettings) -> GateOutcome:
    from ci_gates.image import image_gate

    return image_gate(REPO_ROOT, settings.resolved_home / "gates", tag=args.image_tag,
                      without_docker=args.without_docker)


# Each gate imports its module only when it runs: the image job in CI has no more than pydantic installed.
GATES: dict[str, Gate] = {"lint": _lint, "tests": _tests, "data": _data, "repro": _repro,
                          "performance": _performance, "latency": _latency, "image": _image}


def run_gate(name: str, gate: Gate, args: argparse.Namespace, settings: GateSettings) -> GateOutcome:
    """One gate, timed; whatever it raises is that gate's failure (a gate that cannot look never passes)."""
    started = time.monotonic()
    try:
        outcome = gate(args, settings)
    except MLOpsError as exc:
        outcome = failed(name, "could not check", exc.message)
    except Exception as exc:  # noqa: BLE001  # any crash fails this gate and the next ones still run
        outcome = failed(name, "could not check", f"{type(exc).__name__}: {exc}")
    return GateOutcome(outcome.gate, outcome.status, outcome.checked, outcome.reason, outcome.log,
                       time.monotonic() - started)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from ci_gates.latency import BASELINE

    parser = argparse.ArgumentParser(prog="python -m ci_gates", description=__doc__.split("\n")[0])
    parser.add_argument("gates", nargs="*", metavar="GATE", help=f"any of {', '.join(GATES)} (default: all)")
    parser.add_argument("--without-docker", choices=("fail", "skip"), default="fail",
                        help="the image gate where no Docker engine runs (default: fail)")
    parser.add_argument("--image-tag", default="mlops-serving:gate", help="tag of the image the image gate builds")
    parser.add_argument("--data-run", default=None, help="pipeline run whose snapshot to validate (default: newest)")
    parser.add_argument("--repro-run", default=None, help="training run whose inputs to train twice (default: newest)")
    parser.add_argument("--candidate", default=None, help="registered version to judge (default: newest)")
    parser.add_argument("--baseline", type=Path, default=BASELINE, help="latency baseline file")
    parser.add_argument("--url", default=None, help="measure this running service instead of starting one")
    parser.add_argument("--app", default="serving.main:service_app", help="app factory of the service to start")
    parser.add_argument("--refresh-baseline", action="store_true",
                        help="measure /predict and write the latency baseline instead of running gates")
    parser.add_argument("--seconds", type=int, default=10, help="with --refresh-baseline: seconds of load")
    parser.add_argument("--connections", type=int, default=16, help="with --refresh-baseline: connections")
    args = parser.parse_args(argv)
    unknown = [g for g in args.gates if g not in GATES]
    if unknown:
        parser.exit(2, f"error: unknown gate {', '.join(map(repr, unknown))}; choose from {', '.join(GATES)}\n")
    if args.seconds < 1 or args.connections < 1:
        parser.exit(2, "error: --seconds and --connections must be 1 or more\n")
    return args


def main(argv: list[str] | None = None) -> int:
    from pydantic import ValidationError

    args = parse_args(argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar per download drowns the lines
    try:
        settings = GateSettings()
    except ValidationError as exc:
        print(f"error: invalid MLOPS_* setting: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}", file=sys.stderr)
        return 2
    if args.refresh_baseline:
        from ci_gates.latency import refresh_baseline

        outcome = run_gate("latency", lambda a, s: refresh_baseline(s, a.baseline, seconds=a.seconds,
                                                                    connections=a.connections, url=a.url,
                                                                    app=a.app), args, settings)
        print(outcome.line(), flush=True)
        return 1 if outcome.failed else 0
    selected = [g for g in GATES if g in (args.gates or GATES)]  # always in the order of GATES
    started = time.monotonic()
    outcomes = []
    for name in selected:
        outcome = run_gate(name, GATES[name], args, settings)
        print(outcome.line(), flush=True)
        if outcome.failed and outcome.log is not None:
            print(f"{'':12} details: {outcome.log}", flush=True)
        outcomes.append(outcome)
    counts = {status: sum(o.status == status for o in outcomes) for status in ("PASS", "FAIL", "SKIP")}
    print(f"gates: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped "
          f"in {time.monotonic() - started:.0f} s", flush=True)
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
