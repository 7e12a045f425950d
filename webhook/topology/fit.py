"""Does a pod fit what each NUMA node has free now? The one Topology Manager model
(webhook/topology/merge.py) on a NodeResourceTopology's counts, in the shape the scheduler
extender and explain's `numa-free` check read.

Under a policy that does not align (none, best-effort, or one the model does not know) the
kubelet never refuses on NUMA grounds, so every pod fits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from webhook.topology.admission import PodUnits, now_admission
from webhook.topology.zones import NodeZones

__all__ = ["FreeFit", "free_fit"]


@dataclass(frozen=True, slots=True)
class FreeFit:
    """fits: the kubelet would admit the pod now. reason: why not. tightness: for fitting
    nodes, the share of the chosen NUMA nodes' free GPUs the pod takes (1.0 = exact fit)."""

    fits: bool
    reason: str | None = None
    tightness: float = 0.0


def free_fit(zones: NodeZones, units: PodUnits,
             labels: Mapping[str, str] | None = None) -> FreeFit:  # fmt: skip
    """Whether the pod's `units` fit `zones`' free capacity (labels: the node's, if known)."""
    verdict = now_admission(zones, units, labels)
    return FreeFit(verdict.admitted, verdict.reason, verdict.tightness)
