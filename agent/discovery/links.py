"""PCIe link words between two devices, as `nvidia-smi topo -m` prints them.

PIX: one PCIe switch (or one bridge) above both; PXB: several switches, no host bridge;
PHB: through the host bridge of one root complex; NODE: across root complexes of one known
NUMA node; SYS: across NUMA nodes — or when either NUMA node is unknown, as nvidia-smi does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from common.vocabulary import LINK_WORDS

__all__ = ["Place", "best_link", "classify", "link_rank", "worst_link"]

_RANK = {word: i for i, word in enumerate(LINK_WORDS)}


@dataclass(frozen=True, slots=True)
class Place:
    """Where a PCI function sits: what link classification needs and nothing else."""

    root_complex: str  # host bridge, e.g. "pci0000:00"
    ancestors: tuple[str, ...]  # bridges from the root port down to the parent
    switch: str | None  # nearest switch upstream port
    numa_node: int | None  # effective NUMA node; None when unknown


def classify(a: Place, b: Place) -> str:
    if a.root_complex != b.root_complex:
        known_same = a.numa_node is not None and a.numa_node == b.numa_node
        return "NODE" if known_same else "SYS"
    if a.switch is not None and a.switch == b.switch:
        return "PIX"
    if a.ancestors and a.ancestors[-1:] == b.ancestors[-1:]:
        return "PIX"  # functions behind one bridge, no switch in between
    if a.ancestors and b.ancestors and a.ancestors[0] == b.ancestors[0]:
        return "PXB"  # one root port, then different switches
    return "PHB"


def link_rank(word: str) -> int:
    """0 for PIX (best) … 4 for SYS (worst)."""
    return _RANK[word]


def best_link(words: Iterable[str]) -> str | None:
    return min(words, key=link_rank, default=None)


def worst_link(words: Iterable[str]) -> str | None:
    return max(words, key=link_rank, default=None)
