"""Every overlay builds and every object validates against the Kubernetes or CRD
schemas; a broken manifest, an unknown kind, a failing build and a missing kubectl all fail."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from infra import validate
from infra.manifests import KUBECTL_MISSING, OVERLAYS, build
from infra.manifests import find_object as find
from infra.schemas import SchemaValidator
from mlops.errors import ManifestError

pytestmark = pytest.mark.integration

Objects = list[dict[str, Any]]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_of_every_overlay_is_schema_valid(built: dict[str, Objects], validator: SchemaValidator,
                                                       overlay: str) -> None:
    kinds = {obj["kind"] for obj in built[overlay]}
    assert {"ClusterQueue", "ResourceFlavor", "LocalQueue", "PriorityClass", "Deployment"} <= kinds
    assert validator.validate_all(built[overlay]) == []


def test_overlays_differ_where_they_should(built: dict[str, Objects]) -> None:
    assert find(built["dev"], "Deployment", "prediction-service")["spec"]["replicas"] == 1
    assert find(built["prod"], "Deployment", "prediction-service")["spec"]["replicas"] == 3
    assert any(obj["kind"] == "Application" for obj in built["prod"])
    volcano_kinds = {(obj["apiVersion"].split("/")[0], obj["kind"]) for obj in built["volcano"]}
    assert ("batch.volcano.sh", "Job") in volcano_kinds
    assert ("trainer.kubeflow.org", "TrainJob") not in volcano_kinds


def test_the_kserve_overlay_serves_through_an_inference_service_instead_of_our_deployment(
        built: dict[str, Objects], validator: SchemaValidator) -> None:
    objects = built["kserve"]
    service = find(objects, "InferenceService", "fraud-detector")
    broken = {**service, "spec": {"predictor": {**service["spec"]["predictor"], "canaryTrafficPercent": "ten"}}}

    assert service["apiVersion"] == "serving.kserve.io/v1beta1"
    assert service["spec"]["predictor"]["model"]["protocolVersion"] == "v2"
    assert 0 < service["spec"]["predictor"]["canaryTrafficPercent"] < 100
    assert not [o for o in objects if o["metadata"]["name"] == "prediction-service"]
    assert [e.split(": ", 1)[1] for e in validator.validate_all([broken])] == [
        "spec.predictor.canaryTrafficPercent: 'ten' is not of type 'integer'"]


def _with(objects: Objects, kind: str, name: str, change: Any) -> Objects:
    change(find(objects, kind, name))
    return objects


@pytest.mark.parametrize(("kind", "name", "change", "message"), [
    ("Deployment", "prediction-service",
     lambda o: o["spec"]["template"]["spec"]["containers"][0].update(readinesProbe={}), "readinesProbe"),
    ("Deployment", "mlflow", lambda o: o["spec"].update(replicas="two"), "'two' is not of type"),
    ("ClusterQueue", "team-fraud", lambda o: o["spec"].update(cohort="gpu-platform"), "'cohort' was unexpected"),
    ("ClusterQueue", "team-vision", lambda o: o["spec"]["preemption"].update(reclaimWithinCohort="Always"),
     "'Always' is not one of"),
    ("TrainJob", "fraud-distributed", lambda o: o["spec"].pop("runtimeRef"), "'runtimeRef' is a required"),
    ("ResourceFlavor", "h100-80gb", lambda o: o["metadata"].update(labelz={}), "'labelz' was unexpected"),
])
def test_a_broken_object_fails_with_its_name_and_path(prod: Objects, validator: SchemaValidator, kind: str,
                                                      name: str, change: Any, message: str) -> None:
    errors = validator.validate_all(_with(prod, kind, name, change))
    assert len(errors) == 1
    assert errors[0].startswith(f"{kind}/{name}: ")
    assert message in errors[0]


def test_an_unknown_kind_fails(validator: SchemaValidator) -> None:
    unknown = [("example.com/v1", "Widget"),             # no such kind anywhere
               ("v1", "ConfigMapKeySelector"),           # a nested type, not a top-level kind
               ("kueue.x-k8s.io/v1alpha9", "ClusterQueue")]  # a version the CRD does not serve
    for api_version, kind in unknown:
        obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}
        assert validator.errors(obj) == [f"{kind}/x: unknown kind {kind!r} in {api_version!r} "
                                         f"(not a Kubernetes kind, no CRD in {validator.crd_dir})"]


def _kustomization(directory: Path, manifest: str) -> Path:
    directory.mkdir()
    (directory / "kustomization.yaml").write_text("resources: [objects.yaml]\n")
    (directory / "objects.yaml").write_text(textwrap.dedent(manifest))
    return directory


BROKEN_DEPLOYMENT = """\
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web, namespace: mlops}
    spec:
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: web}}
        spec:
          containers:
            - name: web
              image: nginx
              port: 80
    """


def test_the_check_fails_on_a_broken_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = _kustomization(tmp_path / "broken", BROKEN_DEPLOYMENT)
    assert validate.main([str(broken)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL {broken}" in out
    assert "Deployment/web: spec.template.spec.containers.0: Additional properties are not allowed ('port'" in out
    # The same object also breaks the Deployment policy (no probes, requests or PDB).
    assert "no readinessProbe" in out
    assert "no PodDisruptionBudget" in out


def test_the_check_passes_the_shipped_overlays(capsys: pytest.CaptureFixture[str]) -> None:
    assert validate.main([]) == 0
    assert capsys.readouterr().out.count("ok  ") == len(OVERLAYS)


def test_a_kustomize_error_names_the_directory(tmp_path: Path) -> None:
    directory = tmp_path / "missing-resource"
    directory.mkdir()
    (directory / "kustomization.yaml").write_text("resources: [nowhere.yaml]\n")
    with pytest.raises(ManifestError, match=f"kubectl kustomize {directory} failed: .*nowhere.yaml"):
        build(directory)


def test_without_kubectl_the_check_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert validate.main([]) == 1
    assert capsys.readouterr().err.strip() == f"error: {KUBECTL_MISSING}"
    assert "infra/README.md" in KUBECTL_MISSING


def test_a_missing_crd_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="nowhere does not exist"):
        SchemaValidator(tmp_path / "nowhere")
