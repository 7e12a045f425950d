"""The node's position as labels: pure, from the sources' facts and the Node's own labels.

Rules (docs/network-position.md):
- tiers come from labels already on the node when any tool wrote some, else from metadata;
  when both speak and differ on a tier, the label wins and a note says so;
- a tier's value is its id prefixed by every known outer tier's id (`block.subblock`), so a
  value is unique fleet-wide and names its parents; one that does not fit a label value is
  replaced by a digest of it;
- the NVLink domain comes from GFD's or topograph's label, else from NVML;
- nothing is published for what no source knows.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from agent.position.foreign import foreign_domain, foreign_tiers
from agent.position.model import TierIds, Tiers
from common.k8s_names import label_value_problem
from common.vocabulary import NETWORK_TIERS, Label

__all__ = [
    "POSITION_KEYS",
    "PositionFacts",
    "Positioner",
    "label_safe",
    "position_labels",
    "tier_values",
]

log = logging.getLogger(__name__)

POSITION_KEYS: tuple[str, ...] = (*NETWORK_TIERS, Label.NVLINK_DOMAIN)


@dataclass(frozen=True, slots=True)
class PositionFacts:
    """What the node itself says (NVML, metadata); the Node's labels are read at sync time."""

    metadata: Tiers | None = None
    nvlink_domain: str | None = None
    nvlink_source: str = "NVML"


def label_safe(value: str) -> str:
    """`value` when it is a valid label value, else a stable digest of it."""
    if label_value_problem(value) is None:
        return value
    return "sha256-" + hashlib.sha256(value.encode()).hexdigest()[:32]


def tier_values(ids: TierIds) -> tuple[str | None, str | None, str | None]:
    """Each known tier's id prefixed by its known outer tiers' ids, label-safe."""
    values: list[str | None] = []
    for n, own in enumerate(ids):
        if own is None:
            values.append(None)
            continue
        path = [i for i in reversed(ids[n:]) if i is not None]
        values.append(label_safe(".".join(path)))
    return values[0], values[1], values[2]


def _disagreement(chosen: Tiers, other: Tiers) -> str | None:
    differ = [
        f"tier {n + 1}"
        for n, (a, b) in enumerate(zip(chosen.ids, other.ids, strict=True))
        if a is not None and b is not None and a != b
    ]
    if not differ:
        return None
    where = ", ".join(differ)
    return f"{chosen.source} and {other.source} disagree on {where}: {chosen.source} win"


def position_labels(
    facts: PositionFacts, node_labels: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """(the position labels to publish, notes worth one log line each)."""
    labels: dict[str, str] = {}
    notes: list[str] = []
    tiers = foreign_tiers(node_labels)
    if tiers is not None and facts.metadata is not None and facts.metadata.known:
        note = _disagreement(tiers, facts.metadata)
        if note:
            notes.append(note)
    tiers = tiers or facts.metadata
    if tiers is not None:
        for key, value in zip(NETWORK_TIERS, tier_values(tiers.ids), strict=True):
            if value is not None:
                labels[key] = value
    domain = foreign_domain(node_labels)
    if domain is not None and facts.nvlink_domain not in (None, domain[1]):
        notes.append(
            f"{domain[0]} and {facts.nvlink_source} disagree on the NVLink domain "
            f"({domain[1]} vs {facts.nvlink_domain}): {domain[0]} wins"
        )
    value = domain[1] if domain is not None else facts.nvlink_domain
    if value:
        labels[Label.NVLINK_DOMAIN] = label_safe(value)
    return labels, notes


@dataclass
class Positioner:
    """position_labels with each distinct note logged once per process."""

    _noted: set[str] = field(default_factory=set)

    def labels(self, facts: PositionFacts, node_labels: Mapping[str, str]) -> dict[str, str]:
        labels, notes = position_labels(facts, node_labels)
        for note in notes:
            if note not in self._noted:
                self._noted.add(note)
                log.warning("network position: %s", note)
        return labels

    def apply(
        self, labels: Mapping[str, str], facts: PositionFacts, node_labels: Mapping[str, str]
    ) -> dict[str, str]:
        """`labels` with the position keys recomputed against what the Node carries now."""
        kept = {k: v for k, v in labels.items() if k not in POSITION_KEYS}
        return dict(sorted((kept | self.labels(facts, node_labels)).items()))
