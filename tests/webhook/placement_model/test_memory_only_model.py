"""The placement model on machines with CPU-less NUMA nodes, held to what the real kubelets
did there (tests/e2e/memory_only_cases.py, docs/memory-only-numa.md): every case of that
table, judged on the node's labels and topology annotation as the agent writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.discovery.discover import DiscoveryOptions, discover
from agent.sources.kubelet import discover as read_kubelet
from common.vocabulary import TOPOLOGY_ANNOTATION, Label
from tests.agent.discovery import machines
from tests.agent.discovery.memory_machines import gb200_tray
from tests.e2e.memory_only_cases import CASES, EXPECTED, PODS
from tests.kube import parse_quantity
from tests.webhook.placement_model.nrt import nrt
from webhook.placement_model.free_now import free_fit
from webhook.placement_model.kubelet import config_from_labels
from webhook.placement_model.kubelet_admission import PodUnits, idle_refusal
from webhook.placement_model.merge import admit
from webhook.placement_model.numa_shape import hardware_capacity, numa_shape
from webhook.placement_model.requests import Unit
from webhook.placement_model.zones import zones_from_object

GI = 2**30
SYSTEM_RESERVED = 4 * GI  # the e2e kubelets' systemReserved memory


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each machine's tree, built once for the module (read only)."""
    root = tmp_path_factory.mktemp("memory-only")
    return {m: machines.build(m, root / m) for m in {c[0] for c in CASES.values()}}


def _node(machine: str, fields: dict[str, Any], tmp: Path,
          trees: dict[str, Path]) -> tuple[dict[str, str], Any, dict]:  # fmt: skip
    """(labels, NUMA shape, allocatable) as the agent and the kubelet would publish them."""
    sysfs = trees[machine]
    config = tmp / f"{machine}.json"
    config.write_text(json.dumps(fields))
    found = discover(DiscoveryOptions(sysfs_root=sysfs, use_nvml=False, kubelet_config=config))
    assert read_kubelet(config, None).topology_manager_policy == fields["topologyManagerPolicy"]
    topo = found.topology
    reserved = len(fields.get("reservedSystemCPUs", "").split(","))
    memory = sum(n.memory_kib or 0 for n in topo.numa_nodes) * 1024
    allocatable = {"cpu": 1000 * (len(topo.online_cpus) - reserved),
                   "memory": memory - SYSTEM_RESERVED}  # fmt: skip
    return dict(found.labels), numa_shape(found.annotations[TOPOLOGY_ANNOTATION]), allocatable


def _units(pod: str) -> PodUnits:
    gpus, cpu, memory = PODS[pod]
    unit = (Unit({"nvidia.com/gpu": gpus, "cpu": 1000 * cpu,
                  "memory": int(parse_quantity(memory))}),)  # fmt: skip
    return PodUnits(unit, unit)


def _verdict(labels: dict[str, str], shape: Any, allocatable: dict, pod: str) -> str | None:
    return idle_refusal(labels, shape, allocatable, _units(pod),
                        gpu_resource="nvidia.com/gpu", rdma_resource="rdma/ib")  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_the_model_says_what_the_kubelet_did(
    case: str, tmp_path: Path, trees: dict[str, Path]
) -> None:
    machine, fields, pods = CASES[case]
    labels, shape, allocatable = _node(machine, fields, tmp_path, trees)
    seen = EXPECTED[case]
    if seen["start"] != "ok":
        # A kubelet that does not start registers no node; the model, asked anyway, refuses
        # every pod and says what to set.
        reason = _verdict(labels, shape, allocatable, "1gpu")
        assert reason is not None and "does not start" in reason, reason
        counted = len(shape.cpus)  # every NUMA node the annotation lists, as the kubelet
        options = fields.get("topologyManagerPolicyOptions", {})
        limit = int(options.get("max-allowable-numa-nodes", 8))
        assert seen["start"] == f"unsupported on machines with more than {limit} NUMA Nodes"
        assert counted > limit
        assert f"set max-allowable-numa-nodes to {counted} or more" in reason
        return
    for pod in pods:
        reason = _verdict(labels, shape, allocatable, pod)
        admitted = seen["pods"][pod] == "Running"
        assert (reason is None) == admitted, (case, pod, reason)


def test_the_static_memory_manager_on_34_numa_nodes_is_refused_in_its_words(
    tmp_path: Path, trees: dict[str, Path]
) -> None:
    fields = CASES["gb200-max34"][1] | {"memoryManagerPolicy": "Static"}
    labels, shape, allocatable = _node("gb200-tray", fields, tmp_path, trees)
    reason = _verdict(labels, shape, allocatable, "1gpu")
    assert reason is not None and "searches 2^34 NUMA sets" in reason, reason
    # Under `none` the memory manager's getDefaultHint searches the same sets.
    labels[Label.TOPOLOGY_MANAGER_POLICY] = "none"
    capacity = hardware_capacity(shape, allocatable, gpu_resource="nvidia.com/gpu",
                                 rdma_resource="rdma/ib")  # fmt: skip
    verdict = admit(config_from_labels(labels), capacity, _units("1gpu").pod)
    assert not verdict.admitted and "searches 2^34 NUMA sets" in (verdict.reason or "")
    # A Burstable pod's memory gets no hints (only its GPU is aligned): admitted at once.
    labels[Label.TOPOLOGY_MANAGER_POLICY] = "restricted"
    burstable = (Unit({"nvidia.com/gpu": 1}),)
    assert admit(config_from_labels(labels), capacity, burstable).admitted


@pytest.mark.parametrize(("per_gpu", "admitted"), [(3, True), (4, True), (5, True), (8, False)])
def test_the_static_memory_manager_answers_up_to_its_bound(
    per_gpu: int, admitted: bool, tmp_path: Path
) -> None:
    """make cluster (tests/e2e/test_memory_only_static_search.py): on GB200 trays with 14, 18
    and 22 NUMA nodes a Guaranteed 1-GPU pod was admitted after its search (51 s on 22); on 34
    it had no answer after minutes and 3 GiB."""
    numa = 2 + 4 * per_gpu
    root = tmp_path / "gb200-tray"
    root.mkdir()
    gb200_tray(root, nodes_per_gpu=per_gpu)
    fields = CASES["gb200-max34"][1] | {
        "memoryManagerPolicy": "Static",
        "topologyManagerPolicyOptions": {"max-allowable-numa-nodes": str(numa)},
    }
    labels, shape, allocatable = _node("gb200-tray", fields, tmp_path, {"gb200-tray": root})
    reason = _verdict(labels, shape, allocatable, "1gpu")
    assert (reason is None) == admitted, reason
    if not admitted:
        assert f"searches 2^{numa} NUMA sets" in (reason or ""), reason


def test_a_published_gb200_tray_has_room_now_for_what_its_kubelet_admits() -> None:
    """make cluster: explain's `numa-free` (and the extender, which has no labels) took the
    default limit of 8 NUMA nodes and refused every pod on a running 34-node tray."""
    obj = nrt("gb200", [2, 2, *[0] * 32], gpus_per_zone=2, policy="restricted", scope="pod")
    for zone in obj["zones"][2:]:  # the HBM and empty nodes: memory only
        zone["resources"] = [r for r in zone["resources"] if r["name"] == "memory"]
    one = (Unit({"nvidia.com/gpu": 1}),)
    assert free_fit(zones_from_object(obj), PodUnits(one, one)).fits
    four = (Unit({"nvidia.com/gpu": 4}),)
    assert free_fit(zones_from_object(obj), PodUnits(four, four)).fits  # GPUs alone: 2 nodes
