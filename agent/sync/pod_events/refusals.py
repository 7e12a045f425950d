"""Pods this node's kubelet refused at admission, counted from the agent's pod watch.

A kubelet that will not run a pod it was bound to fails it at once: phase `Failed`, reason
`TopologyAffinityError` (its topology manager found no NUMA alignment) or `OutOf<resource>`
(what the scheduler thought free was not). Only the kubelet sees this, so the agent of that
node counts it: `topoplace_agent_kubelet_refusals_total{namespace, reason}`, each pod once.
Labels stay bounded: namespaces, and reasons from those two families only (resource names
are the node's own), never a pod name or UID.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from agent.sync.pod_events.once import SeenOnce

__all__ = ["KubeletRefusals", "refusal_reason"]

_TOPOLOGY = "TopologyAffinityError"


def refusal_reason(pod: Mapping[str, Any]) -> str | None:
    """The kubelet's admission refusal of `pod`, or None (pure)."""
    status = pod.get("status") or {}
    reason = status.get("reason")
    if status.get("phase") != "Failed" or not isinstance(reason, str):
        return None
    if reason == _TOPOLOGY or (reason.startswith("OutOf") and len(reason) > len("OutOf")):
        return reason
    return None


class KubeletRefusals:
    """`observe(pod)` for every pod the watch sees; counts each refused pod once."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.counter = Counter(
            "topoplace_agent_kubelet_refusals",
            "Pods this node's kubelet refused at admission, by namespace and reason",
            ["namespace", "reason"],
            registry=registry,
        )
        self._seen = SeenOnce()  # pod UIDs, so a relist never counts a refusal twice

    def observe(self, pod: Mapping[str, Any]) -> None:
        reason = refusal_reason(pod)
        metadata = pod.get("metadata") or {}
        uid = str(metadata.get("uid") or "")
        if reason is None or not uid or not self._seen.first(uid):
            return
        self.counter.labels(namespace=str(metadata.get("namespace") or ""), reason=reason).inc()
