"""What is wrong *now*: the NUMA nodes' free capacity from NodeResourceTopology objects,
beside what the hardware checks say. (pure)

A node whose hardware fits the pod may still have no NUMA node with room left: running pods
hold the GPUs. The kubelet then refuses the pod (TopologyAffinityError) although
kube-scheduler counts enough free GPUs on the node. Nodes without a NodeResourceTopology are
judged on the hardware alone, as before.
"""

from __future__ import annotations

from collections.abc import Callable

from webhook.nodefit.checks import PodPlan
from webhook.placement_model.free_now import free_fit
from webhook.placement_model.zones import NodeZones

__all__ = ["NUMA_FREE_CHECK", "ZonesOf", "free_refusal", "remote_note", "remote_penalty"]

NUMA_FREE_CHECK = "numa-free"  # the check group explain reports
ZonesOf = Callable[[str], NodeZones | None]


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
