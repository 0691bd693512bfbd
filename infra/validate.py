"""``make validate-infra``: build every overlay with ``kubectl kustomize``, validate every object
against the Kubernetes or CRD schemas, apply the platform policies, and check that the generated
PrometheusRule matches monitoring/prometheus/alerts.yml. Offline; exit code 1 on any problem.

    python -m infra.validate [--crds DIR] [KUSTOMIZE_DIR ...]   (default: every overlay)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infra import policy, rules
from infra.manifests import DEFAULT_CRD_DIR, INFRA_DIR, OVERLAYS, build
from infra.schemas import SchemaValidator
from mlops.errors import ManifestError


def check(directory: Path, validator: SchemaValidator) -> list[str]:
    """Every schema error and policy violation of one kustomize directory."""
    objects = build(directory)
    return validator.validate_all(objects) + policy.violations(objects)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.validate", description=__doc__.splitlines()[0])
    parser.add_argument("--crds", type=Path, default=DEFAULT_CRD_DIR, help="CRD schema directory")
    parser.add_argument("directories", nargs="*", type=Path,
                        default=[INFRA_DIR / "overlays" / name for name in OVERLAYS])
    args = parser.parse_args(argv)
    failed = False
    try:
        validator = SchemaValidator(args.crds)
        for directory in args.directories:
            problems = check(directory, validator)
            failed = failed or bool(problems)
            print(f"{'FAIL' if problems else 'ok  '} {directory}" + "".join(f"\n  {p}" for p in problems))
    except ManifestError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    if rules.main(["--check"]) != 0:
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
