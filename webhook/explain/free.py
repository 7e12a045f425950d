"""What is wrong *now*: the NUMA nodes' free capacity from NodeResourceTopology objects,
beside what the hardware checks say. (pure)

A node whose hardware fits the pod may still have no NUMA node with room left: running pods
hold the GPUs. The kubelet then refuses the pod (TopologyAffinityError) although
kube-scheduler counts enough free GPUs on the node. Nodes without a NodeResourceTopology are
judged on the hardware alone, as before.
"""

from __future__ import annotations

from collections.abc import Callable

from webhook.explain.checks import PodPlan
from webhook.topology.fit import free_fit
from webhook.topology.zones import NodeZones

__all__ = ["NUMA_FREE_CHECK", "ZonesOf", "free_refusal"]

NUMA_FREE_CHECK = "numa-free"  # the check group explain reports
ZonesOf = Callable[[str], NodeZones | None]


def free_refusal(plan: PodPlan, zones: NodeZones | None) -> str | None:
    """Why no NUMA node of this node has room for the pod now, or None."""
    if zones is None:
        return None
    verdict = free_fit(zones, plan.units)
    return None if verdict.fits else f"now: {verdict.reason}"
