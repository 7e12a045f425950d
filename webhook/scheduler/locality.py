"""Placement that learns from measured locality (opt-in per policy): the extender's
prioritize lowers the score of nodes whose NUMA zones show high recent remote access.

The agents publish each zone's remote-access percent (`topoplace.io/remote-access-percent`,
numastat over the last minute) on the node's NodeResourceTopology; NodeZones keeps the highest.
A node's score drops by `MAX_SCORE × weight/100 × percent/100`, rounded, floored at 0, where
`weight` is the pod's policy's `placement.remoteAccessWeight`. A node without a figure (no
object, an agent that publishes none, nothing run there yet) keeps its score: this is reactive,
the first jobs on a node teach it. Pure; the routes pass the policy look-up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from webhook.nodefit.free_check import remote_penalty
from webhook.placement_model.zones import NodeZones
from webhook.policy.loader import PolicySet
from webhook.vocabulary import POLICY_LABEL

__all__ = ["WeightOf", "lower_scores", "policy_weight"]

WeightOf = Callable[[Mapping[str, Any]], int]


def lower_scores(
    scores: list[dict[str, Any]],
    pod: Mapping[str, Any],
    zones_of: Callable[[str], NodeZones | None],
    weight_of: WeightOf,
    max_score: int,
) -> list[dict[str, Any]]:
    """The HostPriorityList with each node's remote-access penalty taken off."""
    weight = weight_of(pod)
    if weight <= 0:
        return scores  # prioritize's own list, unchanged: no copy of 5,000 entries
    out = []
    for entry in scores:
        host = str(entry.get("Host"))
        score = int(entry.get("Score") or 0)
        lost = remote_penalty(zones_of(host), weight, max_score)
        out.append({"Host": host, "Score": max(0, score - lost)})
    return out


def policy_weight(policies: Callable[[], PolicySet | None]) -> WeightOf:
    """The weight of the policy the pod's label names (0 when none, or not loaded)."""

    def weight_of(pod: Mapping[str, Any]) -> int:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        name = labels.get(POLICY_LABEL) if isinstance(labels, Mapping) else None
        current = policies()
        if not isinstance(name, str) or current is None or name not in current:
            return 0
        return current[name].spec.placement.remote_access_weight

    return weight_of
