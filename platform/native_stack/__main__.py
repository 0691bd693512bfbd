"""``python -m native_stack up | down | status``: bring the native stack up, down, or list its processes."""

from __future__ import annotations

import argparse
import sys
import time

from mlops.errors import MLOpsError
from native_stack.settings import StackSettings
from native_stack.supervisor import Stack, down, status, up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m native_stack", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down", "status"))
    action = parser.parse_args(argv).action
    try:
        settings = StackSettings()
        if action == "up":
            started = time.monotonic()
            up(settings, echo=True)
            print(f"stack up in {time.monotonic() - started:.1f} s; processes recorded in "
                  f"{Stack(settings).records_path}; Prometheus at {Stack(settings).prometheus_url}")
        elif action == "down":
            down(settings, echo=True)
        else:
            for name, alive in status(settings).items():
                print(f"{name:<12} {'running' if alive else 'not running'}")
            if not status(settings):
                print(f"no processes recorded in {Stack(settings).records_path}")
    except MLOpsError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except ValueError as exc:  # pydantic's ValidationError: a bad MLOPS_* value
        print(f"error: invalid MLOPS_* setting: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
