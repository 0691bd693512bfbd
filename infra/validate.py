"""``make validate-infra``: build every overlay with ``kubectl kustomize``, validate every object
against the Kubernetes or CRD schemas, apply the platform policies (the compiled training
pipeline's tasks included: infra/pipeline_auth.py), and check that the generated PrometheusRule
matches monitoring/prometheus/alerts.yml. Offline; exit code 1 on any problem.

    python -m infra.validate [--crds DIR] [--pipeline FILE] [KUSTOMIZE_DIR ...]   (default: every overlay)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infra import pipeline_auth, policy, rules
from infra.manifests import DEFAULT_CRD_DIR, INFRA_DIR, OVERLAYS, REPO_ROOT, build
from infra.schemas import SchemaValidator
from mlops.errors import ManifestError

# pipelines/orchestration/kfp_pipeline.py's COMPILED_PIPELINE, named here without importing kfp.
COMPILED_PIPELINE = REPO_ROOT / "pipelines" / "training_pipeline.yaml"


def check(directory: Path, validator: SchemaValidator, pipeline: Path | None = None) -> list[str]:
    """Every schema error and policy violation of one kustomize directory (and of ``pipeline``'s
    tasks, run in the pipeline's namespace next to it)."""
    objects = build(directory)
    problems = validator.validate_all(objects) + policy.violations(objects)
    if pipeline is not None:
        from pipelines.cluster import PIPELINE_NAMESPACE  # imports kfp: only when a pipeline is checked

        problems += [f"[the pipeline's tasks get MLflow credentials from Secrets] {pipeline.name}: {problem}"
                     for problem in pipeline_auth.pipeline_problems(objects, pipeline, PIPELINE_NAMESPACE)]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.validate", description=__doc__.splitlines()[0])
    parser.add_argument("--crds", type=Path, default=DEFAULT_CRD_DIR, help="CRD schema directory")
    parser.add_argument("--pipeline", type=Path, default=COMPILED_PIPELINE,
                        help="compiled pipeline whose tasks must fit the manifests (default: %(default)s)")
    parser.add_argument("directories", nargs="*", type=Path,
                        default=[INFRA_DIR / "overlays" / name for name in OVERLAYS])
    args = parser.parse_args(argv)
    failed = False
    try:
        validator = SchemaValidator(args.crds)
        for directory in args.directories:
            problems = check(directory, validator, args.pipeline)
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
