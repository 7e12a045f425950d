"""Does a pod fit what each NUMA node has free now? The kubelet's Topology Manager merge
(webhook/explain/numa.py models it on the hardware) replayed on a NodeResourceTopology's
*available* counts.

A device's hint is preferred only when it is as narrow as the fewest NUMA nodes that could
ever hold the request (from allocatable); the kubelet then needs that many NUMA nodes with
enough *free*. Under `single-numa-node` that is one NUMA node for every aligned resource
together; under `restricted` the same width per resource. Units are what the kubelet aligns
together: the pod under scope `pod`, each container in turn under scope `container` (each
takes its devices before the next is judged, tightest NUMA node first, as a scheduler
placing it would hope). CPUs and memory count only under `single-numa-node` and only for a
Guaranteed pod: the static CPU and memory managers give hints for nothing else.

A request that no NUMA set could ever hold is the hardware's problem, not the free
capacity's: `free_fit` leaves it to the hardware checks and says nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from webhook.topology.zones import NodeZones

__all__ = ["ALIGNED_POLICIES", "FreeFit", "free_fit", "min_nodes", "resource_word"]

ALIGNED_POLICIES = ("restricted", "single-numa-node")
GPU = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True)
class FreeFit:
    """fits: the kubelet would admit the pod now. reason: why not. tightness: for fitting
    nodes, the share of the chosen NUMA nodes' free GPUs the pod takes (1.0 = exact fit)."""

    fits: bool
    reason: str | None = None
    tightness: float = 0.0


def resource_word(name: str, count: int | None = None) -> str:
    """How a reason names a resource: GPUs, CPUs, memory, or the extended resource name."""
    if name == GPU or name.endswith("/gpu"):
        return "GPU" if count == 1 else "GPUs"
    if name == "cpu":
        return "CPU" if count == 1 else "CPUs"
    return name


def _units_per_zone(name: str, zones: NodeZones, attr: str) -> list[int]:
    scale = 1000 if name == "cpu" else 1  # NRT counts cores; requests count millicores
    out = []
    for zone in zones.zones:
        value = getattr(zone, attr).get(name, Decimal(0))
        out.append(int(value * scale))
    return out


def _show(name: str, units: int) -> str:
    if name == "cpu":
        return f"{units / 1000:g}"
    if name == "memory":
        return f"{units / 2**30:.0f}Gi"
    return str(units)


def min_nodes(need: int, caps: Sequence[int]) -> int | None:
    """The fewest NUMA nodes that could ever hold `need` (None: not even all of them)."""
    total = 0
    for count, cap in enumerate(sorted(caps, reverse=True), start=1):
        total += cap
        if total >= need:
            return count
    return None


def _aligned(unit: Mapping[str, int], zones: NodeZones, *, guaranteed: bool) -> list[str]:
    names = sorted(n for n in unit if "/" in n and unit[n] > 0 and _listed(n, zones))
    if zones.policy == "single-numa-node" and guaranteed:
        cpu = unit.get("cpu", 0)
        if cpu > 0 and cpu % 1000 == 0 and _listed("cpu", zones):
            names.append("cpu")
        if unit.get("memory", 0) > 0 and _listed("memory", zones):
            names.append("memory")
    return names


def _listed(name: str, zones: NodeZones) -> bool:
    return any(name in z.allocatable for z in zones.zones)


def free_fit(
    zones: NodeZones, units: Sequence[Mapping[str, int]], *, guaranteed: bool, policy: str | None
) -> FreeFit:
    """Whether `units` (see the module doc) fit `zones`' free capacity under `policy` (the
    kubelet's; None: the object's attribute)."""
    policy = policy or zones.policy
    if policy not in ALIGNED_POLICIES or not zones.zones:
        return FreeFit(True)
    free = {}
    taken = given = 0
    for unit in units:
        names = _aligned(unit, zones, guaranteed=guaranteed)
        if not names:
            continue
        for name in names:
            free.setdefault(name, _units_per_zone(name, zones, "available"))
        widths = {n: min_nodes(unit[n], _units_per_zone(n, zones, "allocatable")) for n in names}
        if None in widths.values():
            return FreeFit(True)  # more than the node has at all: the hardware checks say so
        width = 1 if policy == "single-numa-node" else max(w or 1 for w in widths.values())
        if policy == "single-numa-node" and any(w != 1 for w in widths.values()):
            return FreeFit(True)  # wider than one NUMA node ever is: a hardware refusal
        chosen = _tightest(unit, names, free, width)
        if chosen is None:
            return FreeFit(False, _reason(unit, names, free, width))
        for name in names:
            left = unit[name]
            for i in sorted(chosen, key=lambda i: free[name][i]):
                took = min(left, free[name][i])
                free[name][i] -= took
                left -= took
        gpu = next((n for n in names if resource_word(n) in ("GPU", "GPUs")), names[0])
        taken += unit[gpu]
        given += sum(free[gpu][i] for i in chosen) + unit[gpu]
    return FreeFit(True, tightness=taken / given if given else 0.0)


def _tightest(
    unit: Mapping[str, int], names: Sequence[str], free: Mapping[str, list[int]], width: int
) -> tuple[int, ...] | None:
    """The set of `width` NUMA nodes that holds the unit with the least left over."""
    count = len(next(iter(free.values())))
    best: tuple[int, ...] | None = None
    best_left = 0
    for combo in itertools.combinations(range(count), width):
        if all(sum(free[n][i] for i in combo) >= unit[n] for n in names):
            left = sum(
                sum(free[n][i] for i in combo) - unit[n]
                for n in names
                if n not in ("cpu", "memory")
            )
            if best is None or left < best_left:
                best, best_left = combo, left
    return best


def _reason(
    unit: Mapping[str, int], names: Sequence[str], free: Mapping[str, list[int]], width: int
) -> str:
    where = "no NUMA node has" if width == 1 else f"no {width} NUMA nodes have"
    asks = [f"{_show(n, unit[n])} {resource_word(n, unit[n])}" for n in names]
    if len(names) == 1:
        (name,) = names
        shown = ", ".join(_show(name, v) for v in free[name])
        word = resource_word(name, unit[name])
        return f"{where} {_show(name, unit[name])} free {word} (free: {shown})"
    per = "; ".join(f"{resource_word(n)} {', '.join(_show(n, v) for v in free[n])}" for n in names)
    together = f"{', '.join(asks[:-1])} and {asks[-1]}"
    return f"{where} {together} free together (free per NUMA node: {per})"
