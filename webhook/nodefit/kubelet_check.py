"""The node's kubelet as the last check: would its Topology Manager admit the pod once
kube-scheduler bound it there (webhook/placement_model/ has the one model)."""

from __future__ import annotations

from common.kubelet_contract import KUBELET_LABELS
from webhook.nodefit.checks import Check, PodPlan
from webhook.placement_model.filters.nodes import NodeView
from webhook.placement_model.kubelet import config_from_labels
from webhook.placement_model.kubelet_admission import idle_refusal

__all__ = ["kubelet_note", "topology_failure", "topology_key"]

# The node labels the kubelet's admission depends on (topology.kubelet reads these).
_KUBELET_LABELS = KUBELET_LABELS


def topology_failure(check: Check, node: NodeView, plan: PodPlan) -> str | None:
    """The node's kubelet refusing the pod at admission, on the node's hardware."""
    key = topology_key(node)
    if key is None:
        return None
    # Many pods of one shape meet many alike nodes: one model run per (node kind, pod kind).
    memo = (key, plan.units, plan.gpu_resource, check.resource)
    if memo not in _REFUSALS:
        if len(_REFUSALS) >= 4096:
            _REFUSALS.clear()
        _REFUSALS[memo] = idle_refusal(
            node.labels, node.numa, node.allocatable, plan.units,
            gpu_resource=plan.gpu_resource, rdma_resource=check.resource,
        )  # fmt: skip
    return _REFUSALS[memo]


_REFUSALS: dict[tuple[object, ...], str | None] = {}


def kubelet_note(node: NodeView) -> str | None:
    """What the model does not know of this node's kubelet (then it judges it not aligning),
    or what its kubelet would need to align at all: a machine with more NUMA nodes than
    max-allowable-numa-nodes (CPU-less ones count) runs no aligning policy."""
    config = config_from_labels(node.labels)
    if config.unknown:
        return f"{config.unknown}: judged as not aligning"
    counted = len(node.numa.cpus) if node.numa is not None else 0
    if not config.aligning and counted > config.max_numa_nodes:
        without = sum(1 for c in node.numa.cpus if c == 0) if node.numa is not None else 0
        return (
            f"{counted} NUMA nodes ({without} without CPUs): a restricted or single-numa-node "
            f"kubelet starts here only with max-allowable-numa-nodes {counted} or more"
        )
    return None


def topology_key(node: NodeView) -> tuple[object, ...] | None:
    """Everything of `node` that topology_failure reads: nodes with equal keys get the same
    verdict for any pod, so the node cache judges one node per key. None for a node whose
    kubelet never refuses on topology (no aligning policy, or no NUMA shape known)."""
    if node.numa is None or not config_from_labels(node.labels).aligning:
        return None
    labels = tuple(node.labels.get(key) for key in _KUBELET_LABELS)
    alloc = (node.allocatable.get("cpu", 0), node.allocatable.get("memory", 0))
    return (labels, node.numa, alloc)
