"""A node's NUMA shape from the agent's `topoplace.io/topology` annotation, and the capacity
the kubelet's hint providers count on it: from the hardware for an idle node, or from a
NodeResourceTopology's counts for the node now.

Each provider finds the narrowest NUMA set that could ever hold a request from one count
(`width`) and offers only sets with enough of another (`free`): the CPU manager counts every
CPU of a NUMA node for the width but hands out only the CPUs not reserved; the memory manager
counts each NUMA node's memory less its reserved memory for both; devices count all the
node's devices for the width and the unassigned ones for free.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.placement_model.zones import NodeZones

__all__ = ["Capacity", "NumaShape", "hardware_capacity", "load_topology", "numa_shape",
           "zones_capacity"]  # fmt: skip


@dataclass(frozen=True, slots=True)
class NumaShape:
    """Per NUMA node (in id order): CPUs, GPUs, RDMA NICs and memory bytes (0: unknown)."""

    cpus: tuple[int, ...]
    gpus: tuple[int, ...]
    nics: tuple[int, ...]
    memory: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Capacity:
    """Per resource, per NUMA node: what the narrowest-set search counts, and what is free."""

    nodes: int
    width: Mapping[str, tuple[int, ...]]
    free: Mapping[str, tuple[int, ...]]


def _count_cpus(cpulist: str) -> int:
    total = 0
    for part in cpulist.split(","):
        if part:
            lo, _, hi = part.partition("-")
            total += int(hi or lo) - int(lo) + 1
    return total


def load_topology(annotation: Any) -> dict[str, Any] | None:
    """The agent's `topoplace.io/topology` annotation parsed; None when it is not JSON."""
    if not isinstance(annotation, str):
        return None
    try:
        topo = json.loads(annotation)
    except ValueError:
        return None
    return topo if isinstance(topo, dict) else None


def numa_shape(annotation: Any) -> NumaShape | None:
    """The shape from the agent's annotation (text, or parsed by load_topology); None when
    unreadable."""
    topo = load_topology(annotation) if isinstance(annotation, str) else annotation
    if not isinstance(topo, dict):
        return None
    try:
        ids = [int(n["id"]) for n in topo["numaNodes"]]
        slot = {node: i for i, node in enumerate(ids)}
        cpus = [_count_cpus(str(n.get("cpus", ""))) for n in topo["numaNodes"]]
        memory = [int(n.get("memoryKiB") or 0) * 1024 for n in topo["numaNodes"]]
        per: dict[str, list[int]] = {}
        for kind in ("gpus", "nics"):
            counts = [0] * len(ids)
            seen: set[str] = set()
            for device in topo.get(kind, []):
                numa, pci = device.get("numa"), device.get("pci")
                if numa in slot and pci not in seen:  # a NIC with two ports is one function
                    counts[slot[numa]] += 1
                    seen.add(pci)
            per[kind] = counts
    except (ValueError, KeyError, TypeError):
        return None
    if not ids:
        return None
    return NumaShape(tuple(cpus), tuple(per["gpus"]), tuple(per["nics"]), tuple(memory))


def _less_first(counts: tuple[int, ...], reserved: int) -> tuple[int, ...]:
    """`reserved` taken off the lowest NUMA nodes first, as the kubelet reserves CPUs 0,1…
    (reservedSystemCPUs, or the static policy's pick) and memory on NUMA node 0."""
    out = []
    for count in counts:
        took = min(max(reserved, 0), count)
        out.append(count - took)
        reserved -= took
    return tuple(out)


def hardware_capacity(shape: NumaShape, allocatable: Mapping[str, int], *,
                      gpu_resource: str, rdma_resource: str) -> Capacity:  # fmt: skip
    """An idle node: the hardware, less what the node's allocatable says the kubelet keeps."""
    nodes = len(shape.cpus)
    cpus = tuple(c * 1000 for c in shape.cpus)
    cpu_free = _less_first(cpus, sum(cpus) - allocatable.get("cpu", sum(cpus)))
    if any(shape.memory) and len(shape.memory) == nodes:
        total = sum(shape.memory)
        memory = _less_first(shape.memory, total - allocatable.get("memory", total))
    else:  # an older agent's annotation: the allocatable spread evenly
        memory = tuple([allocatable.get("memory", 0) // max(nodes, 1)] * nodes)
    width = {"cpu": cpus, "memory": memory}
    free = {"cpu": cpu_free, "memory": memory}
    for name, counts in ((gpu_resource, shape.gpus), (rdma_resource, shape.nics)):
        if name and any(counts):
            width[name] = free[name] = counts
    return Capacity(nodes, width, free)


def zones_capacity(zones: NodeZones) -> Capacity:
    """The node now: a NodeResourceTopology's capacity, allocatable and available."""
    width: dict[str, tuple[int, ...]] = {}
    free: dict[str, tuple[int, ...]] = {}
    names = {n for z in zones.zones for n in z.allocatable}
    for name in sorted(names):
        scale = 1000 if name == "cpu" else 1  # NRT counts cores; requests count millicores
        basis = "capacity" if name == "cpu" else "allocatable"
        width[name] = tuple(int(getattr(z, basis).get(name, 0) * scale) for z in zones.zones)
        free[name] = tuple(int(z.available.get(name, 0) * scale) for z in zones.zones)
    return Capacity(len(zones.zones), width, free)
