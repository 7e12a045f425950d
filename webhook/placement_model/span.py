"""How far apart a workload's pods run: the domains they span and the most hops. (pure)

The one hop definition, for the per-workload audit and anything else that speaks in hops
(docs/network-position.md). Tier values are unique fleet-wide (a tier-1 value names its
tier-2 parent), so the closest tier two nodes share says how many switches lie between them:
the same node is 0 hops, a shared tier k is 2k - 1 (up to the tier's switch and back down,
one level more each way per tier out), and no shared tier is unknown, never a guess.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from common.vocabulary import NETWORK_TIERS, POSITION_LEVELS

__all__ = ["Span", "hops", "span"]


def hops(a: str, b: str, labels: Mapping[str, Mapping[str, str]]) -> int | None:
    """Switches between nodes `a` and `b` (labels by node name); None when no tier says."""
    if a == b:
        return 0
    la, lb = labels.get(a, {}), labels.get(b, {})
    for tier, key in enumerate(NETWORK_TIERS, start=1):  # closest first
        value = la.get(key)
        if value and value == lb.get(key):
            return 2 * tier - 1
    return None


@dataclass(frozen=True, slots=True)
class Span:
    pods: int
    nodes: int
    domains: dict[str, int]  # level word (network-tier-2, nvlink-domain...) -> domains spanned
    unlabelled: dict[str, int]  # level word -> the workload's nodes without that level's label
    max_hops: int | None  # the most between two of its nodes; None when a pair is unknown
    unknown_pairs: int  # pairs of its nodes that share no tier (or lack the labels)


def span(placed: Iterable[str], labels: Mapping[str, Mapping[str, str]]) -> Span:
    """`placed`: the node name of each running pod of one workload; `labels`: by node name.

    Pairs are of distinct nodes, so the cost is the nodes squared, not the pods.
    """
    per_pod = list(placed)
    nodes = sorted(set(per_pod))
    domains: dict[str, int] = {}
    unlabelled: dict[str, int] = {}
    for word, key in POSITION_LEVELS.items():
        values = [labels.get(n, {}).get(key) or "" for n in nodes]
        domains[word] = len(set(values) - {""})
        unlabelled[word] = values.count("")
    most, unknown = 0, 0
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            h = hops(a, b, labels)
            if h is None:
                unknown += 1
            else:
                most = max(most, h)
    return Span(len(per_pod), len(nodes), domains, unlabelled, None if unknown else most, unknown)
