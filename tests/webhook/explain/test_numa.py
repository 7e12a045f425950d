"""The Topology Manager model against what the real kubelet v1.37.2 did on the simulated
machines (tests/e2e/test_explain_agrees.py checks it there case by case)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.discovery.discover import DiscoveryOptions, discover
from common.vocabulary import TOPOLOGY_ANNOTATION, Label
from tests.agent.discovery import machines
from webhook.engine.recipe import mutate
from webhook.explain.checks import plan_for
from webhook.explain.index import NodeIndex
from webhook.explain.nodes import NodeView
from webhook.explain.numa import NumaShape, numa_shape, topology_refusal
from webhook.explain.verdict import evaluate
from webhook.policy.loader import load_policy_dir
from webhook.warnings.fit import fit
from webhook.warnings.hardware import kubelet_refusal_warning

REPO = Path(__file__).resolve().parents[3]

GI = 2**30


def shape_of(machine: str, tmp_path: Path) -> NumaShape:
    sysfs = machines.build(machine, tmp_path / machine)
    found = discover(DiscoveryOptions(sysfs_root=sysfs, use_nvml=False))
    shape = numa_shape(found.annotations[TOPOLOGY_ANNOTATION])
    assert shape is not None
    return shape


def labels(policy: str, scope: str = "pod") -> dict[str, str]:
    return {
        Label.TOPOLOGY_MANAGER_POLICY: policy,
        Label.TOPOLOGY_MANAGER_SCOPE: scope,
        Label.CPU_MANAGER_POLICY: "static",
        Label.MEMORY_MANAGER_POLICY: "Static",
    }


def refusal(shape: NumaShape, policy: str, *units: dict[str, int], memory: int = 1968 * GI,
            scope: str = "pod", guaranteed: bool = True) -> str | None:  # fmt: skip
    return topology_refusal(
        labels(policy, scope), shape, memory, units,
        guaranteed=guaranteed, gpu_resource="nvidia.com/gpu", rdma_resource="rdma/ib",
    )  # fmt: skip


def test_the_annotation_gives_cpus_gpus_and_nics_per_numa_node(tmp_path: Path) -> None:
    h100 = shape_of("dgx-h100", tmp_path)
    assert (h100.cpus, h100.gpus, sum(h100.nics)) == ((112, 112), (4, 4), 12)
    a100 = shape_of("dgx-a100", tmp_path)
    assert a100.cpus == (32,) * 8 and sum(a100.gpus) == 8 and max(a100.gpus) == 2
    assert numa_shape("not json") is None and numa_shape(None) is None


def test_restricted_refuses_gpus_spanning_two_numa_nodes_with_cpus_that_fit_in_one(
    tmp_path: Path,
) -> None:
    h100 = shape_of("dgx-h100", tmp_path)
    master = {"nvidia.com/gpu": 8, "cpu": 96_000, "memory": 1200 * GI, "rdma/ib": 8}
    reason = refusal(h100, "restricted", master)
    assert reason is not None
    assert "span 2 NUMA nodes but cpu 96 fits in 1" in reason
    assert "topology-manager-policy restricted, scope pod" in reason
    # 24 CPUs per GPU need both NUMA nodes too: every resource agrees on the same set.
    assert refusal(h100, "restricted", {**master, "cpu": 192_000}) is None
    # Fractional CPUs get no hint from the CPU manager, so nothing disagrees.
    assert refusal(h100, "restricted", {**master, "cpu": 96_500}) is None
    assert refusal(h100, "best-effort", master) is None


def test_single_numa_node_needs_everything_on_one_numa_node(tmp_path: Path) -> None:
    a100 = shape_of("dgx-a100", tmp_path)
    memory = 1007 * GI
    two = {"nvidia.com/gpu": 2, "cpu": 16_000, "memory": 100 * GI}
    assert refusal(a100, "single-numa-node", two, memory=memory) is None
    four = refusal(a100, "single-numa-node", {**two, "nvidia.com/gpu": 4}, memory=memory)
    assert four is not None and "4 nvidia.com/gpu needs 2 NUMA nodes" in four
    many_cpus = refusal(a100, "single-numa-node", {**two, "cpu": 40_000}, memory=memory)
    assert many_cpus is not None and "cpu 40 needs 2 NUMA nodes" in many_cpus
    # Not Guaranteed: neither the CPU nor the memory manager gives hints.
    assert refusal(a100, "single-numa-node", {**two, "cpu": 40_000}, memory=memory,
                   guaranteed=False) is None  # fmt: skip


@pytest.mark.parametrize(("scope", "refused"), [("pod", True), ("container", False)])
def test_scope_pod_aligns_the_sum_scope_container_each_container(
    scope: str, refused: bool, tmp_path: Path
) -> None:
    pcie = shape_of("pcie-server", tmp_path)  # 2 GPUs per NUMA node
    half = {"nvidia.com/gpu": 2, "cpu": 8_000, "memory": 16 * GI}
    pod_total = {k: 2 * v for k, v in half.items()}
    units = (pod_total,) if scope == "pod" else (half, half)
    reason = refusal(pcie, "single-numa-node", *units, memory=512 * GI, scope=scope)
    assert (reason is not None) == refused


def node(name: str, machine: str, policy: str, memory: str, tmp_path: Path) -> NodeView:
    """A Node as our agent and a kubelet with static CPU and memory managers publish it."""
    sysfs = machines.build(machine, tmp_path / name)
    found = discover(DiscoveryOptions(sysfs_root=sysfs, use_nvml=False))
    published = {**found.labels, **labels(policy)}
    cpus = sum(shape_of(machine, tmp_path / f"{name}-shape").cpus)
    return NodeView.from_object(
        {
            "kind": "Node",
            "metadata": {"name": name, "labels": published, "annotations": found.annotations},
            "status": {
                "allocatable": {
                    "cpu": str(cpus - 2),
                    "memory": memory,
                    "pods": "110",
                    "nvidia.com/gpu": published[Label.GPUS],
                    "rdma/ib": published[Label.RDMA_NICS],
                }
            },
        }
    )


def test_the_admission_warning_names_matching_nodes_whose_kubelet_would_refuse(
    tmp_path: Path,
) -> None:
    """The labels count a NUMA node's whole memory (125 GiB on the NPS4 DGX A100); the
    kubelet has only allocatable to give (990Gi over 8 nodes here): a pod asking 125Gi
    matches the labels, and the single-numa-node kubelet still refuses it."""
    policies = load_policy_dir(REPO / "policies")
    index = NodeIndex(
        [
            node("h100", "dgx-h100", "restricted", "1968Gi", tmp_path),
            node("a100", "dgx-a100", "single-numa-node", "990Gi", tmp_path),
        ]
    )

    def inference(gpus: int, memory: str | None = None) -> dict[str, Any]:
        limits: dict[str, Any] = {"nvidia.com/gpu": gpus}
        if memory is not None:
            limits["memory"] = memory
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "labels": {"topoplace.io/policy": "inference"}},
            "spec": {
                "containers": [{"name": "c", "image": "vllm", "resources": {"limits": limits}}]
            },
        }
        return mutate(pod, "ml-team", policies).pod

    plan = plan_for(inference(1, "125Gi"), policies.get("inference"))
    assert index.fits_somewhere(plan)
    assert index.refusing_kubelets(plan) == ["a100"]
    parts = kubelet_refusal_warning(plan, index.refusing_kubelets(plan))
    assert parts is not None and len(warning := fit(parts)) <= 256
    assert "the kubelet of 1 matching node (a100) would refuse this pod" in warning
    verdict = evaluate(plan, index.views()[1])
    assert not verdict.fits and verdict.check == "kubelet topology manager"
    assert "memory 125Gi needs 2 NUMA nodes" in (verdict.reason or "")
    # 2 × 64Gi is more than any NUMA node has: the labels already keep the pod off the A100.
    plan = plan_for(inference(2), policies.get("inference"))
    assert index.refusing_kubelets(plan) == []
    verdict = evaluate(plan, index.views()[1])
    assert verdict.reason == "125 GiB memory per NUMA node; pod needs 128"


def test_the_index_agrees_node_by_node_when_alike_nodes_are_judged_together(
    tmp_path: Path,
) -> None:
    """The node cache judges the kubelet's admission once per group of alike nodes (same
    machine, kubelet config and allocatable memory); every node's verdict stays its own."""
    views = [
        node("a100-a", "dgx-a100", "single-numa-node", "990Gi", tmp_path),
        node("a100-b", "dgx-a100", "single-numa-node", "990Gi", tmp_path),
        node("a100-big", "dgx-a100", "single-numa-node", "1990Gi", tmp_path),
        node("h100", "dgx-h100", "restricted", "1968Gi", tmp_path),
    ]
    index = NodeIndex(views)
    limits = {"nvidia.com/gpu": 1, "cpu": "8", "memory": "125Gi"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]},
    }
    plan = plan_for(pod, None)
    refused = sorted(v.name for v in views if not evaluate(plan, v).fits)
    assert refused == ["a100-a", "a100-b"]  # 125Gi fits a NUMA node only with 1990Gi
    assert index.refusing_kubelets(plan) == refused
    assert index.assess(plan).fitting == 2
    index.remove("a100-big")
    index.remove("h100")
    assert not index.fits_somewhere(plan)
