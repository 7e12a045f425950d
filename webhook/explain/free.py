"""What is wrong *now*: the NUMA nodes' free capacity from NodeResourceTopology objects,
beside what the hardware checks say. (pure)

A node whose hardware fits the pod may still have no NUMA node with room left: running pods
hold the GPUs. The kubelet then refuses the pod (TopologyAffinityError) although
kube-scheduler counts enough free GPUs on the node. Nodes without a NodeResourceTopology are
judged on the hardware alone, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from webhook.explain.checks import PodPlan
from webhook.explain.warning import LIMIT
from webhook.topology.fit import free_fit
from webhook.topology.zones import NodeZones

__all__ = ["NUMA_FREE_CHECK", "ZonesOf", "free_refusal", "free_warning"]

NUMA_FREE_CHECK = "numa-free"  # the check group explain reports
ZonesOf = Callable[[str], NodeZones | None]


def free_refusal(plan: PodPlan, zones: NodeZones | None) -> str | None:
    """Why no NUMA node of this node has room for the pod now, or None."""
    if zones is None:
        return None
    verdict = free_fit(zones, plan.units)
    return None if verdict.fits else f"now: {verdict.reason}"


def free_warning(plan: PodPlan, matching: Iterable[str], zones_of: ZonesOf) -> str | None:
    """The admission warning when every node that fits the hardware has no NUMA node with
    room now (None when one has, or a node has no NodeResourceTopology to tell). `matching`
    is read only up to the first node with room: on a cluster with room, that is the first."""
    if plan.policy is None:
        return None
    count = 0
    first: tuple[str, str] | None = None
    for name in matching:
        reason = free_refusal(plan, zones_of(name))
        if reason is None:
            return None
        count += 1
        first = first or (name, reason)
    if first is None:
        return None
    name, reason = first
    many = count != 1
    text = (
        f"placement policy {plan.policy}: {'none of the' if many else 'the'} {count} "
        f"matching node{'s' if many else ''} {'has' if many else 'has no'} room on one NUMA "
        f"node now ({name}: {reason.removeprefix('now: ')}); the pod waits "
        "for a NUMA node to free, or its kubelet refuses it"
    )
    return text if len(text) <= LIMIT else text[: LIMIT - 1] + "…"
