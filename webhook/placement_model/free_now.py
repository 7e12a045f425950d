"""Does a pod fit what each NUMA node has free now? The one Topology Manager model
(webhook/placement_model/merge.py) on a NodeResourceTopology's counts, in the shape the scheduler
extender and explain's `numa-free` check read; and those counts less what pods the object
does not show yet will take (`less_taken`), as the extender's accounting keeps them.

Under a policy that does not align (none, best-effort, or one the model does not know) the
kubelet never refuses on NUMA grounds, so every pod fits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal

from webhook.placement_model.kubelet_admission import PodUnits, now_admission
from webhook.placement_model.merge import Taken
from webhook.placement_model.zones import NodeZones

__all__ = ["FreeFit", "Taken", "free_fit", "less_taken"]


@dataclass(frozen=True, slots=True)
class FreeFit:
    """fits: the kubelet would admit the pod now. reason: why not. tightness: for fitting
    nodes, the share of the chosen NUMA nodes' free GPUs the pod takes (1.0 = exact fit).
    taken: for fitting nodes, what it would hold per NUMA node (the kubelet's choice)."""

    fits: bool
    reason: str | None = None
    tightness: float = 0.0
    taken: Taken = ()


def free_fit(zones: NodeZones, units: PodUnits,
             labels: Mapping[str, str] | None = None) -> FreeFit:  # fmt: skip
    """Whether the pod's `units` fit `zones`' free capacity (labels: the node's, if known)."""
    verdict = now_admission(zones, units, labels)
    return FreeFit(verdict.admitted, verdict.reason, verdict.tightness, verdict.taken)


def less_taken(zones: NodeZones, taken: Iterable[Taken]) -> NodeZones:
    """`zones` with each `taken` (in Capacity's units: CPU in millicores) off what is available,
    never below zero: what the node will have once the kubelet admits those pods."""
    off: dict[tuple[int, str], int] = {}
    for one in taken:
        for name, counts in one:
            for i, count in enumerate(counts):
                off[i, name] = off.get((i, name), 0) + count
    if not off:
        return zones
    out = []
    for i, zone in enumerate(zones.zones):
        available = dict(zone.available)
        for (at, name), count in off.items():
            if at == i and name in available:
                less = Decimal(count) / 1000 if name == "cpu" else Decimal(count)
                available[name] = max(available[name] - less, Decimal(0))
        out.append(replace(zone, available=available))
    return replace(zones, zones=tuple(out))
