"""Free capacity per NUMA node, from the kubelet's PodResources answers (pure).

One zone per NUMA node (`node-<i>`, type `Node`), as NFD's topology-updater writes them and
scheduler-plugins' NodeResourceTopologyMatch reads them. Each resource has
- `capacity`: what the hardware has in that zone (CPUs of the node, its MemTotal, the devices
  the plugins report on it);
- `allocatable`: what the kubelet may hand out there (`GetAllocatableResources`: the CPU
  manager's CPUs, the memory manager's blocks, the plugins' devices); where the kubelet names
  none (CPU manager `none`, memory manager `None`) it is the capacity;
- `available`: allocatable minus what `List` says is assigned in that zone: exclusive CPUs by
  their NUMA node, devices by the zone `GetAllocatableResources` put them in, memory-manager
  blocks by their NUMA nodes.
Only exclusive assignments are counted: a container on the shared CPU pool holds no CPU of a
zone, exactly as the kubelet's Topology Manager sees it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.sources.podresources import Allocatable, MemoryBlock, PodResources

__all__ = ["NumaFacts", "ResourceCount", "Zone", "compute_zones", "zone_name"]

_MEMORY = "memory"


@dataclass(frozen=True, slots=True)
class NumaFacts:
    """What the hardware says, per NUMA node (from agent.sources.cpu)."""

    cpus: Mapping[int, frozenset[int]]  # NUMA node -> online CPUs (memory-only nodes: empty)
    memory_bytes: Mapping[int, int] = field(default_factory=dict)  # NUMA node -> MemTotal
    distances: Mapping[int, Mapping[int, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ResourceCount:
    name: str
    capacity: int
    allocatable: int
    available: int

    def wire(self) -> dict[str, str]:
        # Quantities as strings: plain integers are valid Kubernetes quantities.
        return {
            "name": self.name,
            "capacity": str(self.capacity),
            "allocatable": str(self.allocatable),
            "available": str(self.available),
        }


@dataclass(frozen=True, slots=True)
class Zone:
    numa_node: int
    resources: tuple[ResourceCount, ...]
    costs: tuple[tuple[int, int], ...] = ()  # (other NUMA node, distance)
    attributes: tuple[tuple[str, str], ...] = ()  # (name, value): the remote-access share

    def wire(self) -> dict[str, Any]:
        body: dict[str, Any] = {"name": zone_name(self.numa_node), "type": "Node"}
        if self.costs:
            body["costs"] = [{"name": zone_name(n), "value": d} for n, d in self.costs]
        if self.attributes:
            body["attributes"] = [{"name": n, "value": v} for n, v in self.attributes]
        body["resources"] = [r.wire() for r in self.resources]
        return body


def zone_name(numa_node: int) -> str:
    return f"node-{numa_node}"


def _split(block: MemoryBlock) -> dict[int, int]:
    """A block over several NUMA nodes, split evenly: the kubelet does not say which node
    holds which part (the memory manager spreads a group's memory over its nodes)."""
    nodes = block.numa_nodes
    if not nodes:
        return {}
    share, rest = divmod(block.size, len(nodes))
    return {n: share + (rest if i == 0 else 0) for i, n in enumerate(nodes)}


def _memory_totals(blocks: Iterable[MemoryBlock]) -> dict[str, dict[int, int]]:
    totals: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for block in blocks:
        for node, size in _split(block).items():
            totals[block.memory_type][node] += size
    return totals


def _assigned_cpus(pods: Sequence[PodResources]) -> set[int]:
    cpus: set[int] = set()
    for pod in pods:
        cpus.update(pod.cpu_ids)  # pod-level resources: overlaps the containers' own
        for c in pod.containers:
            cpus.update(c.cpu_ids)
    return cpus


def _assigned_memory(pods: Sequence[PodResources]) -> list[MemoryBlock]:
    blocks: list[MemoryBlock] = []
    for pod in pods:
        # Pod-level blocks are the pod's whole assignment when present; containers' otherwise.
        if pod.memory:
            blocks.extend(pod.memory)
            continue
        for c in pod.containers:
            blocks.extend(c.memory)
    return blocks


def _device_zones(allocatable: Allocatable) -> dict[tuple[str, str], int]:
    """(resource, device ID) -> its zone: the lowest NUMA node its plugin reported. A device
    without topology belongs to no zone (it is not NUMA-bound) and is left out."""
    where: dict[tuple[str, str], int] = {}
    for entry in allocatable.devices:
        if not entry.numa_nodes:
            continue
        for device_id in entry.device_ids:
            where[(entry.resource_name, device_id)] = min(entry.numa_nodes)
    return where


def compute_zones(
    facts: NumaFacts, allocatable: Allocatable, pods: Sequence[PodResources]
) -> tuple[Zone, ...]:
    """One zone per NUMA node, with cpu, memory (and hugepages) and every NUMA-bound
    device resource the kubelet reports (nvidia.com/gpu, rdma/ib, …), only those present."""
    device_zone = _device_zones(allocatable)
    nodes = sorted(set(facts.cpus) | set(device_zone.values()))

    alloc_cpus = set(allocatable.cpu_ids)
    taken_cpus = _assigned_cpus(pods)
    alloc_memory = _memory_totals(allocatable.memory)
    taken_memory = _memory_totals(_assigned_memory(pods))

    devices: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for (resource, _), zone in device_zone.items():
        devices[zone][resource] += 1
    taken_devices: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    seen: set[tuple[str, str]] = set()  # a device listed twice (init + app container) once
    for pod in pods:
        for c in pod.containers:
            for d in c.devices:
                for device_id in d.device_ids:
                    key = (d.resource_name, device_id)
                    if key in device_zone and key not in seen:
                        seen.add(key)
                        taken_devices[device_zone[key]][d.resource_name] += 1

    zones: list[Zone] = []
    for node in nodes:
        counts: list[ResourceCount] = []
        cpus = facts.cpus.get(node, frozenset())
        if cpus:
            usable = (cpus & alloc_cpus) if alloc_cpus else cpus
            free = len(usable - taken_cpus)
            counts.append(ResourceCount("cpu", len(cpus), len(usable), free))
        counts.extend(_memory_counts(node, facts, alloc_memory, taken_memory))
        for resource in sorted(devices.get(node, {})):
            total = devices[node][resource]
            used = taken_devices.get(node, {}).get(resource, 0)
            counts.append(ResourceCount(resource, total, total, max(total - used, 0)))
        costs = tuple(sorted(facts.distances.get(node, {}).items()))
        zones.append(Zone(numa_node=node, resources=tuple(counts), costs=costs))
    return tuple(zones)


def _memory_counts(
    node: int,
    facts: NumaFacts,
    alloc: Mapping[str, Mapping[int, int]],
    taken: Mapping[str, Mapping[int, int]],
) -> list[ResourceCount]:
    counts: list[ResourceCount] = []
    capacity = facts.memory_bytes.get(node)
    pinned = alloc.get(_MEMORY, {}).get(node)
    usable = pinned if pinned is not None else capacity
    if usable is not None:
        used = taken.get(_MEMORY, {}).get(node, 0)
        cap = capacity if capacity is not None else usable
        counts.append(ResourceCount(_MEMORY, cap, usable, max(usable - used, 0)))
    for kind in sorted(k for k in alloc if k != _MEMORY):
        size = alloc[kind].get(node)
        if size:
            used = taken.get(kind, {}).get(node, 0)
            counts.append(ResourceCount(kind, size, size, max(size - used, 0)))
    return counts
