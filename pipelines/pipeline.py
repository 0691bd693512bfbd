"""The training pipeline: ingest -> validate -> preprocess -> train -> export -> evaluate -> (if better) deploy.

Compiled to pipelines/training_pipeline.yaml (IR YAML, committed); `mlops pipeline compile`
rewrites it and a test fails when it is stale.
"""

from pathlib import Path

from kfp import compiler, dsl

from pipelines import components
from pipelines.cluster import run_on_gpu_queue

PIPELINE_NAME = "fraud-training"
COMPILED_PIPELINE = Path(__file__).parent / "training_pipeline.yaml"


@dsl.pipeline(name=PIPELINE_NAME,
              description="Raw transactions to a registered fraud model; promotes only a better one.")
def training_pipeline(source: str, run_name: str = "", since: str = "", until: str = "", last_weeks: int = 0) -> None:
    # The training window ("" and 0: all data); last_weeks is resolved when ingest runs, so a
    # recurring run always trains on the weeks before it.
    ingested = components.ingest(source=source, run_name=run_name, since=since, until=until,
                                 last_weeks=last_weeks)
    run_id = ingested.outputs["run_id"]
    validated = components.validate(snapshot=ingested.outputs["snapshot"], run_id=run_id)
    features = components.preprocess(snapshot=ingested.outputs["snapshot"], run_id=run_id)
    features.after(validated)
    trained = components.train(train=features.outputs["train"], validation=features.outputs["validation"],
                               test=features.outputs["test"], run_id=run_id)
    run_on_gpu_queue(trained)
    exported = components.export(model=trained.outputs["model"], test=features.outputs["test"], run_id=run_id)
    evaluated = components.evaluate(train=features.outputs["train"], test=features.outputs["test"],
                                    model=exported.outputs["onnx"], model_uri=exported.outputs["Output"],
                                    run_id=run_id)
    with dsl.If(evaluated.outputs["Output"] == "promote", name="better-than-production"):
        deployed = components.deploy(run_id=run_id)
    # Every step reads or writes shared state (registry, feature store): never reuse cached results.
    for task in (ingested, validated, features, trained, exported, evaluated, deployed):
        task.set_caching_options(enable_caching=False)


def compile_pipeline(path: Path = COMPILED_PIPELINE) -> Path:
    compiler.Compiler().compile(training_pipeline, package_path=str(path))
    return path
