"""The Topology Manager model against what the real kubelet v1.37.2 did on the simulated
machines (tests/e2e/test_explain_agrees.py checks it there case by case)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.discovery.discover import DiscoveryOptions, discover
from common.vocabulary import TOPOLOGY_ANNOTATION, Label
from tests.agent.discovery import machines
from webhook.engine.recipe import mutate
from webhook.nodefit.checks import plan_for
from webhook.nodefit.node_index import NodeIndex
from webhook.nodefit.node_verdict import evaluate
from webhook.placement_model.filters.nodes import NodeView
from webhook.placement_model.kubelet_admission import PodUnits, idle_refusal
from webhook.placement_model.numa_shape import NumaShape, numa_shape
from webhook.placement_model.requests import Unit
from webhook.policy.loader import load_policy_dir
from webhook.warnings.hardware import kubelet_refusal_warning
from webhook.warnings.lines import shorten

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
            scope: str = "pod", cpus: int | None = None) -> str | None:  # fmt: skip
    """The model on an idle node of `shape`; `units` are what the kubelet aligns (a pod that
    is not Guaranteed has no cpu or memory in them)."""
    aligned = tuple(Unit(u) for u in units)
    allocatable = {"memory": memory, "cpu": 1000 * (cpus if cpus is not None else sum(shape.cpus))}
    return idle_refusal(
        labels(policy, scope), shape, allocatable, PodUnits(aligned, aligned),
        gpu_resource="nvidia.com/gpu", rdma_resource="rdma/ib",
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
    assert "span 2 NUMA nodes but 96 CPUs fit in 1" in reason
    assert "topology-manager-policy restricted, scope pod" in reason
    # 24 CPUs per GPU need both NUMA nodes too: every resource agrees on the same set.
    assert refusal(h100, "restricted", {**master, "cpu": 192_000}) is None
    # Fractional CPUs get no hint from the CPU manager (requests.aligned_units leaves them
    # out), so nothing disagrees.
    assert refusal(h100, "restricted", {k: v for k, v in master.items() if k != "cpu"}) is None
    assert refusal(h100, "best-effort", master) is None


def test_single_numa_node_needs_everything_on_one_numa_node(tmp_path: Path) -> None:
    a100 = shape_of("dgx-a100", tmp_path)
    memory = 1007 * GI
    two = {"nvidia.com/gpu": 2, "cpu": 16_000, "memory": 100 * GI}
    assert refusal(a100, "single-numa-node", two, memory=memory) is None
    four = refusal(a100, "single-numa-node", {**two, "nvidia.com/gpu": 4}, memory=memory)
    assert four is not None and "4 GPUs need 2 NUMA nodes" in four
    many_cpus = refusal(a100, "single-numa-node", {**two, "cpu": 40_000}, memory=memory)
    assert many_cpus is not None and "40 CPUs need 2 NUMA nodes" in many_cpus
    # Not Guaranteed: neither the CPU nor the memory manager gives hints, only the GPUs count.
    assert refusal(a100, "single-numa-node", {"nvidia.com/gpu": 2}, memory=memory) is None


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
    """A pod without a policy gets no kubelet-shape terms: kube-scheduler may bind it where
    its kubelet must refuse it, and the warning says where."""
    index = NodeIndex(
        [
            node("h100", "dgx-h100", "restricted", "1968Gi", tmp_path),
            node("a100", "dgx-a100", "single-numa-node", "990Gi", tmp_path),
        ]
    )
    plan = plan_for(pod_with({"nvidia.com/gpu": 1, "cpu": "40", "memory": "8Gi"}), None)
    assert index.fits_somewhere(plan)
    assert index.refusing_kubelets(plan) == ["a100"]
    plan = replace(plan, policy="inference")
    parts = kubelet_refusal_warning(plan, index.refusing_kubelets(plan))
    assert parts is not None and len(warning := shorten(parts)) <= 256
    assert "the kubelet of 1 matching node (a100) would refuse this pod" in warning
    verdict = evaluate(plan, index.views()[1])
    assert not verdict.fits and verdict.check == "kubelet topology manager"
    assert "40 CPUs need 2 NUMA nodes" in (verdict.reason or "")


def pod_with(limits: dict[str, Any], policy: str | None = None) -> dict[str, Any]:
    labels = {"topoplace.io/policy": policy} if policy else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]},
    }


ISSUE_POLICY = """\
apiVersion: topoplace.io/v1alpha1
kind: PlacementPolicy
metadata: {name: aligned}
spec:
  placement: {topologyManagerPolicies: [single-numa-node, restricted]}
  resources: {guaranteed: true, cpuPerGpu: 12, memoryPerGpu: 96Gi,
              rdma: {resource: rdma/ib, perGpu: 1}}
"""


@pytest.mark.parametrize(("gpus", "fits"), [(4, True), (8, False)])
def test_node_affinity_leaves_out_the_kubelets_that_must_refuse(
    gpus: int, fits: bool, tmp_path: Path
) -> None:
    """The issue's policy: 8 GPUs with 96 CPUs under `restricted` on a DGX H100 (GPUs need 2
    NUMA nodes, CPUs 1) is refused by every such kubelet; the mutated pod's required node
    affinity leaves those shapes out, so it waits Pending instead, and explain says why."""
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "aligned.yaml").write_text(ISSUE_POLICY)
    policies = load_policy_dir(tmp_path / "p")
    h100 = node("h100", "dgx-h100", "restricted", "1968Gi", tmp_path)
    mutated = mutate(pod_with({"nvidia.com/gpu": gpus}, "aligned"), "ml", policies).pod
    terms = mutated["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert len(terms) > 1  # ORed kubelet shapes
    plan = plan_for(mutated, policies.get("aligned"))
    verdict = evaluate(plan, h100)
    assert verdict.fits is fits
    index = NodeIndex([h100])
    assert index.fits_somewhere(plan) is fits and index.refusing_kubelets(plan) == []
    if not fits:
        assert verdict.check == "kubelet shape"
        assert "left out by the policy's node affinity: its kubelet would refuse it" in (
            verdict.reason or ""
        )
        assert "span 2 NUMA nodes but 96 CPUs fit in 1" in (verdict.reason or "")
    # Mutating the mutated pod again changes nothing.
    assert mutate(mutated, "ml", policies).patch == []


def test_the_index_agrees_node_by_node_when_alike_nodes_are_judged_together(
    tmp_path: Path,
) -> None:
    """The node cache judges the kubelet's admission once per group of alike nodes (same
    machine, kubelet config and allocatable); every node's verdict stays its own."""
    views = [
        node("a100-a", "dgx-a100", "single-numa-node", "990Gi", tmp_path),
        node("a100-b", "dgx-a100", "single-numa-node", "990Gi", tmp_path),
        node("a100-calm", "dgx-a100", "best-effort", "990Gi", tmp_path),
        node("h100", "dgx-h100", "restricted", "1968Gi", tmp_path),
    ]
    index = NodeIndex(views)
    plan = plan_for(pod_with({"nvidia.com/gpu": 1, "cpu": "40", "memory": "8Gi"}), None)
    refused = sorted(v.name for v in views if not evaluate(plan, v).fits)
    assert refused == ["a100-a", "a100-b"]  # 40 CPUs need 2 of the A100's NUMA nodes
    assert index.refusing_kubelets(plan) == refused
    assert index.assess(plan).fitting == 2
    index.remove("a100-calm")
    index.remove("h100")
    assert not index.fits_somewhere(plan)


def test_whole_numa_nodes_of_cpus_and_memory_get_the_full_node_pod_admitted(
    tmp_path: Path,
) -> None:
    """`resources.wholeNumaNodes`: 8 GPUs get two NUMA nodes' worth of CPUs and memory, so
    under `restricted` every resource needs the same two NUMA nodes and the DGX H100 admits
    it; the mutation does not depend on the node."""
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "full.yaml").write_text(
        ISSUE_POLICY.replace(
            "cpuPerGpu: 12, memoryPerGpu: 96Gi,",
            "wholeNumaNodes: {gpus: 4, cpu: 100, memory: 900Gi},",
        )
    )
    policies = load_policy_dir(tmp_path / "p")
    h100 = node("h100", "dgx-h100", "restricted", "1968Gi", tmp_path)
    for gpus, cpu, memory in ((8, "200", "1800Gi"), (4, "100", "900Gi"), (2, "100", "900Gi")):
        mutated = mutate(pod_with({"nvidia.com/gpu": gpus}, "aligned"), "ml", policies).pod
        limits = mutated["spec"]["containers"][0]["resources"]["limits"]
        assert (limits["cpu"], limits["memory"]) == (cpu, memory)
        verdict = evaluate(plan_for(mutated, policies.get("aligned")), h100)
        assert verdict.fits, verdict.reason


@pytest.mark.parametrize(
    ("init", "main", "admitted"), [(5, 1, False), (5, 4, False), (4, 1, True), (5, 5, True)]
)
def test_an_app_container_takes_over_its_init_containers_gpus_numa_nodes(
    init: int, main: int, admitted: bool, tmp_path: Path
) -> None:
    """make cluster, restricted with scope container on an idle DGX H100 (Burstable pods:
    only the device manager gives hints): the app container reuses the init container's
    GPUs, so its device hints must hold their NUMA nodes; 5 GPUs span two, and 1 or 4 GPUs
    on two NUMA nodes are not the narrowest set: refused."""
    h100 = shape_of("dgx-h100", tmp_path)
    units = (Unit({"nvidia.com/gpu": init}, keeps=False), Unit({"nvidia.com/gpu": main}))
    reason = idle_refusal(
        labels("restricted", "container"), h100, {"cpu": 224_000, "memory": 1968 * GI},
        PodUnits((Unit({"nvidia.com/gpu": max(init, main)}),), units),
        gpu_resource="nvidia.com/gpu", rdma_resource="rdma/ib",
    )  # fmt: skip
    assert (reason is None) is admitted, reason
    if not admitted:
        assert "it takes over from an init container are on NUMA nodes 0, 1" in (reason or "")
