"""The node's kubelet as the last check: would its Topology Manager admit the pod once
kube-scheduler bound it there (webhook/explain/numa.py has the model)."""

from __future__ import annotations

from common.vocabulary import Label
from webhook.explain.checks import Check, PodPlan
from webhook.explain.nodes import NodeView
from webhook.explain.numa import topology_refusal

__all__ = ["topology_failure"]


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
