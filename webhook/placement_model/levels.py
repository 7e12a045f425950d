"""The network levels a fleet carries (the agent's position labels) and their domains. (pure)

One model for `kueue-topology` (a Kueue Topology must be a strict tree, ending in the
hostname), `validate` and admission (a keepTogether level no node carries) and `explain`'s
per-domain view. Levels, outermost first: network-tier-3, -2, -1, then the NVLink domain; a
level is kept only when every one of its domains lies inside one domain of the level kept
above it, so what Kueue receives nests.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from common.vocabulary import NETWORK_TIERS, POSITION_LEVELS, Label

__all__ = [
    "HOSTNAME",
    "FleetLevels",
    "carried",
    "domains_at",
    "fleet_levels",
]

HOSTNAME = "kubernetes.io/hostname"
# Outermost first: the order a Kueue Topology lists its levels in.
_OUTERMOST_FIRST: tuple[str, ...] = (*reversed(NETWORK_TIERS), Label.NVLINK_DOMAIN)
_WORD = {key: word for word, key in POSITION_LEVELS.items()}


@dataclass(frozen=True, slots=True)
class FleetLevels:
    keys: tuple[str, ...]  # the label keys of the tree, outermost first, ending with HOSTNAME
    notes: list[str] = field(default_factory=list)  # levels left out, nodes without a level


def carried(labels: Iterable[Mapping[str, str]]) -> set[str]:
    """The position keys some node carries."""
    keys: set[str] = set()
    for node in labels:
        keys.update(k for k in _OUTERMOST_FIRST if node.get(k))
    return keys


def domains_at(nodes: Iterable[tuple[str, Mapping[str, str]]], key: str) -> dict[str, list[str]]:
    """Domain value -> names of its nodes; nodes without the label are under ''."""
    out: dict[str, list[str]] = defaultdict(list)
    for name, labels in nodes:
        out[labels.get(key, "")].append(name)
    return dict(sorted(out.items()))


def fleet_levels(nodes: Sequence[tuple[str, Mapping[str, str]]]) -> FleetLevels:
    """The strict tree of position levels the fleet carries."""
    present = carried(labels for _, labels in nodes)
    keys: list[str] = []
    notes: list[str] = []
    for key in (k for k in _OUTERMOST_FIRST if k in present):
        parent = keys[-1] if keys else None
        broken = _not_nested(nodes, key, parent) if parent else None
        if broken is not None:
            notes.append(
                f"{_WORD[key]} left out: domain {broken} spans several {_WORD[parent or '']} "
                "domains (a Kueue Topology must be a tree)"
            )
            continue
        keys.append(key)
    for key in keys:
        lacking = sorted(name for name, labels in nodes if not labels.get(key))
        if lacking:
            shown = ", ".join(lacking[:5]) + (", …" if len(lacking) > 5 else "")
            notes.append(
                f"{len(lacking)} node(s) without {key} ({shown}): Kueue does not place "
                "topology-aware workloads there"
            )
    return FleetLevels((*keys, HOSTNAME), notes)


def _not_nested(
    nodes: Sequence[tuple[str, Mapping[str, str]]], key: str, parent: str
) -> str | None:
    """A domain of `key` whose nodes have several `parent` values, if any."""
    parents: dict[str, set[str]] = defaultdict(set)
    for _, labels in nodes:
        if labels.get(key):
            parents[labels[key]].add(labels.get(parent, ""))
    return next((value for value, seen in sorted(parents.items()) if len(seen) > 1), None)
