"""GPU Operator values, the MIG layouts and the autoscaler settings agree with each other and with
the Kueue quotas: every layout is a valid partition of an 80 GB A100 or H100, and the MIG quotas
of all teams never exceed the slices the MIG node provides."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from infra.manifests import INFRA_DIR, find_object
from infra.schemas import SchemaValidator

pytestmark = pytest.mark.unit

# GPU PCI ids (device-filter) and the MIG profiles each offers: compute slices used, most per GPU.
GPUS = {"0x20B210DE": "A100-SXM4-80GB", "0x233010DE": "H100-80GB-HBM3"}
PROFILES = {"1g.10gb": (1, 7), "1g.20gb": (1, 4), "2g.20gb": (2, 3), "3g.40gb": (3, 2), "4g.40gb": (4, 1),
            "7g.80gb": (7, 1)}
GPUS_PER_NODE = 8


def _values(name: str) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((INFRA_DIR / "helm" / name).read_text())
    return values


def _mig_layouts(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    config_map = find_object(objects, "ConfigMap", "custom-mig-config")
    layouts: dict[str, list[dict[str, Any]]] = yaml.safe_load(config_map["data"]["config.yaml"])["mig-configs"]
    return layouts


def _slices(entry: dict[str, Any]) -> dict[str, int]:
    devices = GPUS_PER_NODE if entry["devices"] == "all" else len(entry["devices"])
    return {f"nvidia.com/mig-{profile}": count * devices for profile, count in entry.get("mig-devices", {}).items()}


def test_the_operator_runs_every_component_the_platform_needs() -> None:
    values = _values("gpu-operator-values.yaml")
    for component in ("driver", "toolkit", "devicePlugin", "dcgmExporter", "gfd", "migManager"):
        assert values[component]["enabled"] is True, component
    assert values["mig"]["strategy"] in {"single", "mixed"}
    assert values["dcgmExporter"]["serviceMonitor"]["enabled"] is False  # the platform ships its own


# Top-level keys of the chart's values that are not ClusterPolicy fields.
CHART_ONLY_KEYS = {"nfd"}


def _cluster_policy(values: dict[str, Any]) -> dict[str, Any]:
    """The ClusterPolicy the chart renders from the values (it copies each section into spec)."""
    spec = {key: section for key, section in values.items() if key not in CHART_ONLY_KEYS}
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
            "spec": spec}


def test_the_values_are_a_valid_cluster_policy(validator: SchemaValidator) -> None:
    values = _values("gpu-operator-values.yaml")
    assert validator.errors(_cluster_policy(values)) == []
    values["migManager"]["confg"] = values["migManager"].pop("config")
    assert validator.errors(_cluster_policy(values)) == [
        "ClusterPolicy/cluster-policy: spec.migManager: Additional properties are not allowed ('confg' was unexpected)"]


def test_every_mig_layout_is_a_valid_partition(built: dict[str, list[dict[str, Any]]]) -> None:
    layouts = _mig_layouts(built["prod"])
    assert _values("gpu-operator-values.yaml")["migManager"]["config"]["default"] in layouts
    for name, entries in layouts.items():
        used_devices: list[int] = []
        for entry in entries:
            if not entry["mig-enabled"]:
                assert "mig-devices" not in entry, name
                continue
            assert set(entry["device-filter"]) <= set(GPUS), name
            compute = sum(PROFILES[profile][0] * count for profile, count in entry["mig-devices"].items())
            assert compute <= 7, f"{name}: {compute} compute slices on one GPU"
            for profile, count in entry["mig-devices"].items():
                assert count <= PROFILES[profile][1], f"{name}: {count} x {profile}"
            used_devices += range(GPUS_PER_NODE) if entry["devices"] == "all" else entry["devices"]
        assert len(used_devices) == len(set(used_devices)), f"{name}: a GPU is partitioned twice"


def test_mig_quotas_fit_the_mig_node(built: dict[str, list[dict[str, Any]]]) -> None:
    objects = built["prod"]
    flavor = find_object(objects, "ResourceFlavor", "a100-mig")
    layout = _mig_layouts(objects)[flavor["spec"]["nodeLabels"]["nvidia.com/mig.config"]]
    provided: dict[str, int] = {}
    for entry in layout:
        for resource, count in _slices(entry).items():
            provided[resource] = provided.get(resource, 0) + count
    assert provided == {"nvidia.com/mig-1g.10gb": 28, "nvidia.com/mig-3g.40gb": 8}
    nominal: dict[str, int] = {}
    for queue in (o for o in objects if o["kind"] == "ClusterQueue"):
        for group in queue["spec"]["resourceGroups"]:
            for flavor_quota in group["flavors"]:
                if flavor_quota["name"] != "a100-mig":
                    continue
                for resource in flavor_quota["resources"]:
                    nominal[resource["name"]] = nominal.get(resource["name"], 0) + int(resource["nominalQuota"])
                    assert int(resource["borrowingLimit"]) + int(resource["nominalQuota"]) <= provided[resource["name"]]
    assert nominal == provided


def test_the_gpu_node_group_scales_from_zero_and_waits_before_scaling_down() -> None:
    values = _values("cluster-autoscaler-values.yaml")
    gpu_group = next(group for group in values["autoscalingGroups"] if "gpu" in group["name"])
    assert gpu_group["minSize"] == 0 < gpu_group["maxSize"]
    for group in values["autoscalingGroups"]:
        assert group["minSize"] <= group["maxSize"], group["name"]
    assert values["extraArgs"]["scale-down-delay-after-add"].endswith("m")
    assert values["extraArgs"]["scale-down-unneeded-time"].endswith("m")
