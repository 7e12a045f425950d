"""Zones for NUMA nodes without CPUs, as the kubelet's own view implies: it counts every NUMA
node the kernel lists (its Topology Manager against `max-allowable-numa-nodes`, its Static
memory manager's state and hints), so the NodeResourceTopology has one zone per node — a
Grace GPU's HBM node with memory and no `cpu`, an empty MIG node with memory 0 — and a reader
counts the same nodes the kubelet does (docs/memory-only-numa.md)."""

from __future__ import annotations

from pathlib import Path

from agent.nrt.snapshot import numa_facts
from agent.nrt.zones import compute_zones
from agent.sources.podresources import allocatable_resources, list_pod_resources
from tests.agent.audit.kubelet_stub import FakeKubelet, container, devices, memory, pod
from tests.agent.discovery.machines import build
from tests.agent.discovery.memory_machines import B200_HBM_KIB, GRACE_MEMORY_KIB, gb200_hbm_node

GIB = 2**30
RESERVED = 4 * GIB  # the e2e kubelets' reservedMemory on NUMA node 0


def _resources(zone: object) -> dict[str, tuple[int, int, int]]:
    return {r.name: (r.capacity, r.allocatable, r.available) for r in zone.resources}  # type: ignore[attr-defined]


def test_gb200_tray_zones_under_the_static_memory_manager(
    kubelet: FakeKubelet, tmp_path: Path
) -> None:
    facts = numa_facts(build("gb200-tray", tmp_path / "sys"))
    hbm = [gb200_hbm_node(g) for g in range(4)]
    grace = GRACE_MEMORY_KIB * 1024
    # What a Static memory manager offers: every node with memory, less node 0's reservation;
    # a node of 0 kB gets no block (GetAllocatableMemory skips Allocatable 0).
    blocks = [memory("memory", grace - RESERVED, [0]), memory("memory", grace, [1])]
    blocks += [memory("memory", B200_HBM_KIB * 1024, [n]) for n in hbm]
    kubelet.offer(
        devices("nvidia.com/gpu", ["0", "1"], [0]),
        devices("nvidia.com/gpu", ["2", "3"], [1]),
        cpus=range(2, 144),
        mem=blocks,
    )
    trainer = container(
        "trainer",
        devices("nvidia.com/gpu", ["0"], [0]),
        cpus=[2, 3],
        mem=[memory("memory", 32 * GIB, [0])],
    )
    kubelet.serve(pod("ml", "p", trainer))
    zones = compute_zones(
        facts, allocatable_resources(kubelet.socket), list_pod_resources(kubelet.socket)
    )
    assert [z.numa_node for z in zones] == list(range(34))
    by = {z.numa_node: _resources(z) for z in zones}
    assert by[0]["cpu"] == (72, 70, 68) and by[0]["nvidia.com/gpu"] == (2, 2, 1)
    assert by[0]["memory"] == (grace, grace - RESERVED, grace - RESERVED - 32 * GIB)
    for node in hbm:  # memory the kubelet may pin, no CPU, no device
        assert by[node] == {"memory": (B200_HBM_KIB * 1024,) * 3}
    for node in set(range(2, 34)) - set(hbm):
        assert by[node] == {"memory": (0, 0, 0)}
