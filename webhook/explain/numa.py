"""Would the kubelet's Topology Manager admit this pod on this machine? A model of its merge,
from the node's topology annotation (CPUs, GPUs and NICs per NUMA node) and its policy labels.

What the real kubelet showed (make cluster, kubelet v1.37.2): each hint provider (the CPU
manager for a Guaranteed pod's integer CPUs under the static policy, the memory manager
under Static, the device manager for devices with NUMA affinity) offers every NUMA set that
can hold the request, and calls it preferred only when it is as narrow as the smallest set
that could ever hold it. A merged hint is preferred only when all providers chose the *same*
set, each preferred. So under `restricted` a pod is refused when its resources do not all
need the same number of NUMA nodes: 8 GPUs spanning two NUMA nodes with 96 CPUs that would
fit in one is a TopologyAffinityError. Under `single-numa-node` everything must fit on one.

This sees the machine, not what is free on it: a node fragmented by running pods can still
refuse a pod this admits.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.vocabulary import Label
from webhook.topology.fit import min_nodes

__all__ = [
    "ALIGNING",
    "NumaShape",
    "load_topology",
    "numa_shape",
    "topology_refusal",
]

ALIGNING = ("restricted", "single-numa-node")


@dataclass(frozen=True, slots=True)
class NumaShape:
    """Per NUMA node (in id order): CPUs, GPUs and RDMA NICs."""

    cpus: tuple[int, ...]
    gpus: tuple[int, ...]
    nics: tuple[int, ...]


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
    return NumaShape(tuple(cpus), tuple(per["gpus"]), tuple(per["nics"]))


def _fits(mask: Sequence[int], wants: Sequence[tuple[str, int, tuple[int, ...]]]) -> bool:
    return all(sum(caps[i] for i in mask) >= need for _, need, caps in wants)


def _show(name: str, need: int) -> str:
    if name == "cpu":
        return f"cpu {need / 1000:g}"
    if name == "memory":
        return f"memory {need / 2**30:.0f}Gi"
    return f"{need} {name}"


@functools.lru_cache(maxsize=4096)
def _refusal(
    policy: str, wants: tuple[tuple[str, int, tuple[int, ...]], ...], nodes: int
) -> str | None:
    mins = {}
    for name, need, caps in wants:
        least = min_nodes(need, caps)
        if least is None:
            return None  # not enough on the whole node: the allocatable check says so
        mins[name] = least
    if not mins:
        return None
    if policy == "single-numa-node":
        wide = [f"{_show(n, q)} needs {mins[n]} NUMA nodes" for n, q, _ in wants if mins[n] > 1]
        if wide:
            return "; ".join(wide)
        if not any(_fits((i,), wants) for i in range(nodes)):
            return "no single NUMA node holds all of " + ", ".join(_show(n, q) for n, q, _ in wants)
        return None
    if len(set(mins.values())) > 1:
        widest = max(mins.values())
        spans = [_show(n, q) for n, q, _ in wants if mins[n] == widest]
        narrow = [f"{_show(n, q)} fits in {mins[n]}" for n, q, _ in wants if mins[n] < widest]
        return (
            f"{', '.join(spans)} span {widest} NUMA nodes but {', '.join(narrow)}: "
            "no NUMA set is the narrowest for every resource"
        )
    width = next(iter(mins.values()))
    if not any(_fits(m, wants) for m in itertools.combinations(range(nodes), width)):
        return f"no set of {width} NUMA nodes holds all of " + ", ".join(
            _show(n, q) for n, q, _ in wants
        )
    return None


def topology_refusal(
    labels: Mapping[str, str],
    shape: NumaShape | None,
    memory: int,
    units: Sequence[Mapping[str, int]],
    *,
    guaranteed: bool,
    gpu_resource: str,
    rdma_resource: str,
) -> str | None:
    """Why this node's kubelet would refuse the pod at admission, or None.

    `units`: what is aligned together (the pod's total under scope pod, else each
    container); `memory`: the node's allocatable memory, spread evenly over NUMA nodes.
    """
    policy = labels.get(Label.TOPOLOGY_MANAGER_POLICY)
    if policy not in ALIGNING or shape is None:
        return None
    static_cpu = guaranteed and labels.get(Label.CPU_MANAGER_POLICY) == "static"
    static_memory = guaranteed and labels.get(Label.MEMORY_MANAGER_POLICY) == "Static"
    nodes = len(shape.cpus)
    memory_caps = tuple([memory // nodes] * nodes)
    cpu_caps = tuple(c * 1000 for c in shape.cpus)
    for unit in units:
        wants: list[tuple[str, int, tuple[int, ...]]] = []
        if unit.get(gpu_resource, 0) > 0 and any(shape.gpus):
            wants.append((gpu_resource, unit[gpu_resource], shape.gpus))
        if rdma_resource and unit.get(rdma_resource, 0) > 0 and any(shape.nics):
            wants.append((rdma_resource, unit[rdma_resource], shape.nics))
        cpu = unit.get("cpu", 0)
        if static_cpu and cpu > 0 and cpu % 1000 == 0:  # only integer CPUs get hints
            wants.append(("cpu", cpu, cpu_caps))
        if static_memory and unit.get("memory", 0) > 0:
            wants.append(("memory", unit["memory"], memory_caps))
        reason = _refusal(policy, tuple(wants), nodes)
        if reason is not None:
            scope = labels.get(Label.TOPOLOGY_MANAGER_SCOPE, "container")
            return (
                f"its kubelet would refuse it (TopologyAffinityError under "
                f"topology-manager-policy {policy}, scope {scope}): {reason}"
            )
    return None
