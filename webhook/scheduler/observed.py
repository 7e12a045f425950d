"""What a NodeResourceTopology change shows, for the ledger (accounting.py): whether the
kubelet admitted a pod, how much less each NUMA zone has available now, and whether that
covers what a pod was predicted to take (pure), and what the ledger reads of the
published objects (`Published`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from decimal import Decimal
from typing import Any, Protocol

from webhook.placement_model.free_now import Taken
from webhook.placement_model.zones import NodeZones, zone_counts

__all__ = ["Published", "admitted", "covers", "delta", "same_counts", "scaled"]


class Published(Protocol):
    """The NodeResourceTopology cache (nrt_cache.py): its current table and look-up."""

    @property
    def zones(self) -> Mapping[str, NodeZones]: ...

    @property
    def classes(self) -> Mapping[str, Hashable]: ...

    def get(self, node: str) -> NodeZones | None: ...


def admitted(pod: Mapping[str, Any]) -> bool:
    """The kubelet has posted a status: it admitted the pod (a refusal is phase Failed)."""
    status = pod.get("status") or {}
    return bool(
        status.get("startTime")
        or status.get("containerStatuses")
        or status.get("phase") in ("Running", "Succeeded")
    )


def scaled(name: str, value: Decimal) -> int:
    return int(value * 1000) if name == "cpu" else int(value)


def delta(before: NodeZones, after: NodeZones) -> dict[str, list[int]]:
    """Per resource, per zone: how much less is available now (Capacity's units)."""
    names = {n for z in before.zones for n in z.available}
    return {
        n: [scaled(n, b.available.get(n, Decimal(0)) - a.available.get(n, Decimal(0)))
            for b, a in zip(before.zones, after.zones, strict=True)]
        for n in names
    }  # fmt: skip


def covers(delta: Mapping[str, list[int]], taken: Taken, *, per_zone: bool) -> bool:
    for name, counts in taken:
        seen = delta.get(name)
        if seen is None:
            return False
        if len(seen) != len(counts):
            return False
        if per_zone and any(s < c for s, c in zip(seen, counts, strict=True)):
            return False
        if sum(seen) < sum(counts):
            return False
    return True


def same_counts(a: NodeZones, b: NodeZones) -> bool:
    return (a.policy, a.scope) == (b.policy, b.scope) and (
        a.zones is b.zones or zone_counts(a.zones) == zone_counts(b.zones)
    )
