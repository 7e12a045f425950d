"""Field-by-field validation of PlacementPolicy (the loader adds file and line)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tests.webhook.builders import policy_doc
from webhook.policy.model import PlacementPolicy, Rdma

GOOD_DATASET = {"name": "imagenet", "version": "2024-06", "source": "s3://b/", "mountPath": "/d"}

REJECTED: list[tuple[str, dict[str, Any], str]] = [
    ("metadata name not a label value", {"metadata": {"name": "Has Space"}}, "metadata.name"),
    ("empty metadata name", {"metadata": {"name": ""}}, "metadata.name"),
    ("wrong apiVersion", {"apiVersion": "v1"}, "apiVersion"),
    ("namespace glob with uppercase", {"spec": {"namespaces": ["ML-*"]}}, "spec.namespaces.0"),
    ("empty namespace list", {"spec": {"namespaces": []}}, "spec.namespaces"),
    ("bad link word", {"spec": {"placement": {"gpuNicLink": "NVLINK"}}}, "gpuNicLink"),
    ("pairs not a bool", {"spec": {"placement": {"gpuNicPairs": "maybe"}}}, "gpuNicPairs"),
    (
        "unknown topology manager policy",
        {"spec": {"placement": {"topologyManagerPolicies": ["numa"]}}},
        "topologyManagerPolicies",
    ),
    (
        "required label key invalid",
        {"spec": {"placement": {"requiredLabels": {"-bad": "x"}}}},
        "requiredLabels",
    ),
    (
        "required label value invalid",
        {"spec": {"placement": {"requiredLabels": {"a": "x y"}}}},
        "requiredLabels.a",
    ),
    (
        "NUMA-aware scheduler without a refusing topology policy",
        {"spec": {"placement": {"numaAwareScheduler": "topoplace-numa-scheduler"}}},
        "spec.placement",
    ),
    (
        "NUMA-aware scheduler beside best-effort kubelets",
        {
            "spec": {
                "placement": {
                    "numaAwareScheduler": "topoplace-numa-scheduler",
                    "topologyManagerPolicies": ["single-numa-node", "best-effort"],
                }
            }
        },
        "spec.placement",
    ),
    (
        "scheduler name not a DNS subdomain",
        {
            "spec": {
                "placement": {
                    "numaAwareScheduler": "NUMA Scheduler",
                    "topologyManagerPolicies": ["restricted"],
                }
            }
        },
        "spec.placement.numaAwareScheduler",
    ),
    ("cpuPerGpu zero", {"spec": {"resources": {"cpuPerGpu": 0}}}, "cpuPerGpu"),
    ("cpuPerGpu boolean", {"spec": {"resources": {"cpuPerGpu": True}}}, "resources"),
    ("memory not a quantity", {"spec": {"resources": {"memoryPerGpu": "lots"}}}, "memoryPerGpu"),
    ("memory negative", {"spec": {"resources": {"memoryPerGpu": "-1Gi"}}}, "memoryPerGpu"),
    (
        "rdma perGpu zero",
        {"spec": {"resources": {"rdma": {"resource": "rdma/ib", "perGpu": 0}}}},
        "perGpu",
    ),
    (
        "rdma resource without domain",
        {"spec": {"resources": {"rdma": {"resource": "ib"}}}},
        "rdma.resource",
    ),
    ("numaBinding unknown", {"spec": {"launcher": {"numaBinding": "all"}}}, "numaBinding"),
    ("env name invalid", {"spec": {"env": {"1X": "a"}}}, "spec.env.1X"),
    ("env YAML boolean", {"spec": {"env": {"X": True}}}, "spec.env.X"),
    ("onMissing unknown", {"spec": {"onMissing": "ignore"}}, "onMissing"),
    ("python spelling is not YAML spelling", {"spec": {"on_missing": "deny"}}, "on_missing"),
    ("worker not a container name", {"spec": {"workers": ["Trainer"]}}, "workers"),
    (
        "dataset mountPath root",
        {"spec": {"datasets": [{**GOOD_DATASET, "mountPath": "/"}]}},
        "mountPath",
    ),
    (
        "dataset mountPath relative",
        {"spec": {"datasets": [{**GOOD_DATASET, "mountPath": "data"}]}},
        "mountPath",
    ),
    (
        "dataset source scheme",
        {"spec": {"datasets": [{**GOOD_DATASET, "source": "ftp://h/x"}]}},
        "source",
    ),
    (
        "dataset sourceSecret not a Secret name",
        {"spec": {"datasets": [{**GOOD_DATASET, "sourceSecret": "Creds_RO"}]}},
        "sourceSecret",
    ),
    (
        "dataset weight above 100",
        {"spec": {"datasets": [{**GOOD_DATASET, "preferWeight": 101}]}},
        "preferWeight",
    ),
    (
        "dataset name too long",
        {"spec": {"datasets": [{**GOOD_DATASET, "name": "d" * 64}]}},
        "datasets.0.name",
    ),
    (
        "two datasets with one name",
        {"spec": {"datasets": [GOOD_DATASET, {**GOOD_DATASET, "mountPath": "/e"}]}},
        "datasets",
    ),
]


def build(override: dict[str, Any]) -> dict[str, Any]:
    doc = policy_doc("p")
    for key, value in override.items():
        doc[key] = value
    return doc


@pytest.mark.parametrize(
    ("override", "field"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED]
)
def test_invalid_field_is_rejected_at_its_path(override, field):
    with pytest.raises(ValidationError) as info:
        PlacementPolicy.model_validate(build(override))
    locs = [".".join(str(p) for p in e["loc"]) for e in info.value.errors()]
    assert any(field in loc for loc in locs), locs


def test_numa_aware_scheduler_names_the_fields_it_needs():
    placement = {"numaAwareScheduler": "topoplace-numa-scheduler"}
    with pytest.raises(ValidationError) as info:
        PlacementPolicy.model_validate(build({"spec": {"placement": placement}}))
    assert (
        "numaAwareScheduler needs topologyManagerPolicies limited to restricted and/or "
        "single-numa-node (got none)" in str(info.value)
    )
    ok = {**placement, "topologyManagerPolicies": ["restricted", "single-numa-node"]}
    policy = PlacementPolicy.model_validate(build({"spec": {"placement": ok}}))
    assert policy.spec.placement.numa_aware_scheduler == "topoplace-numa-scheduler"


def test_full_policy_from_the_design_document():
    policy = PlacementPolicy.model_validate(
        build(
            {
                "metadata": {"name": "ddp-h100"},
                "spec": {
                    "namespaces": ["ml-*"],
                    "gpuResource": "nvidia.com/gpu",
                    "workers": ["trainer"],
                    "placement": {
                        "gpuNicLink": "PXB",
                        "gpuNicPairs": True,
                        "singleNumaNode": True,
                        "topologyManagerPolicies": ["single-numa-node", "restricted"],
                        "requiredLabels": {"nvidia.com/gpu.product": "H100-SXM"},
                    },
                    "resources": {
                        "guaranteed": True,
                        "cpuPerGpu": 12,
                        "memoryPerGpu": "96Gi",
                        "rdma": {"resource": "rdma/ib", "perGpu": 1},
                    },
                    "datasets": [{**GOOD_DATASET, "version": 2024, "preferWeight": 80}],
                    "launcher": {"numaBinding": "exclusive"},
                    "env": {"NCCL_NET_GDR_LEVEL": "PXB", "NCCL_IB_TIMEOUT": 22},
                    "onMissing": "warn",
                },
            }
        )
    )
    assert policy.spec.datasets[0].version == "2024"
    assert policy.spec.env == {"NCCL_NET_GDR_LEVEL": "PXB", "NCCL_IB_TIMEOUT": "22"}
    assert policy.allows_namespace("ml-vision") and not policy.allows_namespace("default")


def test_namespace_globs_are_fnmatch_patterns():
    policy = PlacementPolicy.model_validate(build({"spec": {"namespaces": ["team-?", "ml-[ab]*"]}}))
    assert [policy.allows_namespace(n) for n in ("team-1", "team-12", "ml-a1", "ml-c")] == [
        True,
        False,
        True,
        False,
    ]


def test_no_namespaces_means_every_namespace():
    assert PlacementPolicy.model_validate(policy_doc("p")).allows_namespace("anything")


def test_empty_sections_mean_defaults():
    policy = PlacementPolicy.model_validate(
        build({"spec": {"launcher": None, "placement": None, "env": None, "namespaces": None}})
    )
    assert policy.spec.launcher.numa_binding is None and policy.spec.env == {}
    assert policy.allows_namespace("anything")


@pytest.mark.parametrize(
    "whole",
    [{"gpus": 0, "nics": 4}, {"gpus": 4}, {"gpus": 4, "nics": "6"}, {"gpus": 4, "nics": 6, "x": 1}],
)
def test_whole_numa_nodes_needs_two_positive_integers(whole: dict[str, object]) -> None:
    doc = policy_doc("p", resources={"rdma": {"resource": "rdma/ib", "wholeNumaNodes": whole}})
    with pytest.raises(ValidationError, match="wholeNumaNodes"):
        PlacementPolicy.model_validate(doc)


@pytest.mark.parametrize(("gpus", "nics"), [(1, 6), (4, 6), (5, 12), (8, 12), (0, 0)])
def test_whole_numa_nodes_counts_every_nic_of_the_numa_nodes_taken(gpus: int, nics: int) -> None:
    rdma = Rdma.model_validate({"resource": "rdma/ib", "wholeNumaNodes": {"gpus": 4, "nics": 6}})
    assert rdma.count(gpus) == nics
    assert Rdma.model_validate({"resource": "rdma/ib", "perGpu": 2}).count(gpus) == 2 * gpus
