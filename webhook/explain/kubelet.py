"""The node's kubelet as the last check: would its Topology Manager admit the pod once
kube-scheduler bound it there (webhook/explain/numa.py has the model)."""

from __future__ import annotations

from common.vocabulary import Label
from webhook.explain.checks import Check, PodPlan
from webhook.explain.nodes import NodeView
from webhook.explain.numa import ALIGNING, topology_refusal

__all__ = ["topology_failure", "topology_key"]

# The node labels the kubelet's admission depends on (numa.topology_refusal reads these).
_KUBELET_LABELS = (
    Label.TOPOLOGY_MANAGER_POLICY,
    Label.TOPOLOGY_MANAGER_SCOPE,
    Label.CPU_MANAGER_POLICY,
    Label.MEMORY_MANAGER_POLICY,
)


def topology_failure(check: Check, node: NodeView, plan: PodPlan) -> str | None:
    """The node's kubelet refusing the pod at admission (webhook/explain/numa.py)."""
    pod_scope = node.labels.get(Label.TOPOLOGY_MANAGER_SCOPE) == "pod"
    return topology_refusal(
        node.labels,
        node.numa,
        node.allocatable.get("memory", 0),
        (plan.requests,) if pod_scope else plan.containers,
        guaranteed=plan.guaranteed,
        gpu_resource=plan.gpu_resource,
        rdma_resource=check.resource,
    )


def topology_key(node: NodeView) -> tuple[object, ...] | None:
    """Everything of `node` that topology_failure reads: nodes with equal keys get the same
    verdict for any pod, so the node cache judges one node per key. None for a node whose
    kubelet never refuses on topology (no aligning policy, or no NUMA shape known)."""
    if node.numa is None or node.labels.get(Label.TOPOLOGY_MANAGER_POLICY) not in ALIGNING:
        return None
    labels = tuple(node.labels.get(key) for key in _KUBELET_LABELS)
    return (labels, node.numa, node.allocatable.get("memory", 0))
