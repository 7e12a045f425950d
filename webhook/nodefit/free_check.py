"""What is wrong *now*: the NUMA nodes' free capacity from NodeResourceTopology objects,
beside what the hardware checks say. (pure)

A node whose hardware fits the pod may still have no NUMA node with room left: running pods
hold the GPUs. The kubelet then refuses the pod (TopologyAffinityError) although
kube-scheduler counts enough free GPUs on the node. Nodes without a NodeResourceTopology are
judged on the hardware alone, as before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, Final

from webhook.nodefit.checks import PodPlan
from webhook.placement_model.free_now import free_fit
from webhook.placement_model.requests import pod_requests
from webhook.placement_model.zones import NodeZones

__all__ = [
    "NUMA_FREE_CHECK",
    "STALE_S",
    "StaleOf",
    "ZonesOf",
    "free_refusal",
    "remote_note",
    "remote_penalty",
    "stale_of",
]

NUMA_FREE_CHECK = "numa-free"  # the check group explain reports
# The agent rewrites the object within seconds of a pod event (reads at +0, 1, 3, 7 s): an
# object that shows none of a pod admitted this long ago is out of date. The extender's too.
STALE_S: Final = 15.0
ZonesOf = Callable[[str], NodeZones | None]
StaleOf = Callable[[str], str | None]


def free_refusal(plan: PodPlan, zones: NodeZones | None) -> str | None:
    """Why no NUMA node of this node has room for the pod now, or None."""
    if zones is None:
        return None
    verdict = free_fit(zones, plan.units)
    return None if verdict.fits else f"now: {verdict.reason}"


def remote_penalty(zones: NodeZones | None, weight: int, max_score: int = 10) -> int:
    """Extender score points a node loses to measured remote access (policy
    `placement.remoteAccessWeight`): max_score × weight/100 × percent/100, rounded; 0 without
    a figure (reactive: a node nothing ran on is not penalised) or with weight 0."""
    if zones is None or zones.remote_access_percent is None or weight <= 0:
        return 0
    return round(max_score * weight * zones.remote_access_percent / 10_000)


def remote_note(zones: NodeZones | None, weight: int) -> str | None:
    """The node's recent remote-access figure in words, or None where it publishes none."""
    if zones is None or zones.remote_access_percent is None:
        return None
    text = f"recent remote memory access {zones.remote_access_percent}% (measured, busiest zone)"
    if weight > 0:
        text += f"; remoteAccessWeight {weight}: extender score -{remote_penalty(zones, weight)}"
    return text


def _started(pod: Mapping[str, Any]) -> datetime | None:
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return None
    try:
        return datetime.fromisoformat(str(status.get("startTime") or "").replace("Z", "+00:00"))
    except ValueError:
        return None


def stale_note(
    zones: NodeZones | None, pods: Iterable[Mapping[str, Any]], now: datetime
) -> str | None:
    """Why the node's NodeResourceTopology is out of date, or None: it shows fewer devices in
    use than the pods its kubelet admitted over STALE_S ago hold (the agent has not rewritten
    it since; it is down, or cannot read the kubelet). Devices only: their count per pod is
    its request, where CPUs are exclusive only for some pods."""
    if zones is None:
        return None
    names = {n for z in zones.zones for n in z.allocatable
             if n not in ("cpu", "memory") and not n.startswith("hugepages-")}  # fmt: skip
    held: Counter[str] = Counter()
    for pod in pods:
        start = _started(pod)
        if start is not None and (now - start).total_seconds() > STALE_S:
            held.update(
                {n: v for n, v in pod_requests(pod.get("spec") or {}).items() if n in names}
            )
    for name in sorted(held):
        shown = sum(z.allocatable.get(name, Decimal(0)) - z.available.get(name, Decimal(0))
                    for z in zones.zones)  # fmt: skip
        if held[name] > shown:
            return (
                f"NodeResourceTopology out of date: it shows {shown} {name} in use, the pods "
                f"its kubelet admitted over {STALE_S:.0f}s ago hold {held[name]} (agent down?)"
            )
    return None


def stale_of(
    zones: Mapping[str, NodeZones], pods: Iterable[Mapping[str, Any]], now: datetime
) -> StaleOf:
    """stale_note per node, over the pods placed on the nodes (spec.nodeName)."""
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if isinstance(node, str) and node in zones:
            by_node.setdefault(node, []).append(pod)
    notes = {node: stale_note(zones[node], on_node, now) for node, on_node in by_node.items()}
    return notes.get
