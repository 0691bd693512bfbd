"""dvc.yaml, written from the declaration: one DVC stage per pipeline step, plus the raw data's.

    python -m pipelines.orchestration.dvc_stages [--check]      (make dvc-yaml)

Each step's stage runs ``mlops step <name>`` with settings from params.yaml; its deps are the
artifacts and records it reads, the data files the declaration names and every repository module
the step function imports, its params the params.yaml settings that code reads (both derived by
:mod:`pipelines.orchestration.stage_deps`), its outs what it writes. The records name MLflow state
and stay uncached. A test fails when the committed dvc.yaml is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from pipelines.orchestration.declaration import BUNDLED_CONTRACT_PATH, RECORD, STEPS, Step
from pipelines.orchestration.stage_deps import code_deps, params

DVC_FILE = Path(__file__).resolve().parents[2] / "dvc.yaml"
OUT_ROOT = ".mlops/dvc"
RAW_DATA = f"{OUT_ROOT}/raw/transactions.csv"
HEADER = """\
# Written by `make dvc-yaml` (pipelines/orchestration/dvc_stages.py) from the pipeline's declaration
# (pipelines/orchestration/declaration.py): do not edit by hand. `dvc repro` (or `make repro`)
# rebuilds the model from raw data and reruns only what a changed file, parameter or module makes
# stale. Each step stage calls `mlops step ...`, the step function its Kubeflow task calls, with
# settings from params.yaml. Outputs live in .mlops/dvc/ (git-ignored; DVC caches and pushes
# them). The records/*.json files name MLflow runs and registered versions: not cached, since DVC
# cannot restore what they point to.
"""
# The raw data: not a pipeline step (the pipeline starts from a source someone else wrote).
GENERATE_STAGE: dict[str, Any] = {
    "cmd": f"mlops data generate --out {RAW_DATA} --rows ${{demo_rows}} --seed ${{seed}}",
    "deps": ["platform/mlops/data/generator.py", BUNDLED_CONTRACT_PATH],
    "params": ["demo_rows", "seed"],
    "outs": [RAW_DATA],
}


def artifact_path(step: str, output: str) -> str:
    return f"{OUT_ROOT}/{step}/{output}"


def record_path(step: str) -> str:
    return f"{OUT_ROOT}/records/{step}.json"


def _option(name: str, value: object) -> str:
    return f"--{name.replace('_', '-')} {value}"


def stage(step: Step, steps: tuple[Step, ...] = STEPS) -> dict[str, Any]:
    """The DVC stage of ``step``."""
    files = dict(step.stage.files)
    options = [_option(name, path) for name, path in files.items()]
    options += [_option(c.name, artifact_path(c.step, c.output)) for c in step.consumes]
    options += [_option(t.name, record_path(t.step)) for t in step.takes]
    options += [_option(p.name, artifact_path(step.name, p.name)) for p in step.produces]
    outs: list[Any] = [artifact_path(step.name, p.name) for p in step.produces]
    if step.record is not None:
        options.append(_option(RECORD, record_path(step.name)))
        outs.append({record_path(step.name): {"cache": False}})
    after = [artifact_path(earlier, p.name) for earlier in step.after
             for p in next(s for s in steps if s.name == earlier).produces]
    deps = [*files.values(), *(artifact_path(c.step, c.output) for c in step.consumes),
            *(record_path(t.step) for t in step.takes), *after, *step.stage.data, *code_deps(step.function)]
    spec: dict[str, Any] = {"cmd": " ".join(["MLOPS_PARAMS_FILE=params.yaml mlops step", step.name, *options]),
                            "deps": list(dict.fromkeys(deps))}
    if read := params(step.function):
        spec["params"] = read
    if outs:
        spec["outs"] = outs
    return spec


def _plots() -> list[Any]:
    evaluation = artifact_path("evaluate", "evaluation")
    return [
        {"precision_recall": {"title": "Precision-recall of the candidate, test split", "x": "recall",
                              "y": {f"{evaluation}/pr_curve.csv": "precision"}}},
        {"reliability": {"title": "Reliability of the served probability, test split", "x": "mean_predicted",
                         "y": {f"{evaluation}/reliability.csv": "observed_rate"}}},
        *(f"{evaluation}/{picture}.png" for picture in ("pr_curve", "reliability_curve", "confusion_matrix")),
    ]


def dvc_yaml(steps: tuple[Step, ...] = STEPS) -> str:
    """dvc.yaml's text for ``steps``."""
    spec = {
        "stages": {"generate": GENERATE_STAGE, **{step.name: stage(step, steps) for step in steps}},
        "metrics": [f"{OUT_ROOT}/{step.name}/{path}" for step in steps for path in step.stage.metrics],
        "plots": _plots(),
    }
    return HEADER + yaml.safe_dump(spec, sort_keys=False, width=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.orchestration.dvc_stages",
                                     description="Write dvc.yaml from the pipeline's declaration.")
    parser.add_argument("--check", action="store_true", help="only check that the committed dvc.yaml is current")
    args = parser.parse_args(argv)
    fresh = dvc_yaml()
    if args.check:
        if not DVC_FILE.is_file() or DVC_FILE.read_text() != fresh:
            print(f"{DVC_FILE} is stale; run `make dvc-yaml`", file=sys.stderr)
            return 1
        print(f"{DVC_FILE} is current")
        return 0
    DVC_FILE.write_text(fresh)
    print(f"wrote {DVC_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
