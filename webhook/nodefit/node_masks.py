"""Sets of nodes as bit masks (one bit per node slot), and what an assessment over them says."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from webhook.nodefit.checks import Check

__all__ = ["Assessment", "Miss", "add_bit", "bit_or", "clear_bit"]


@dataclass(frozen=True, slots=True)
class Miss:
    """Nodes whose first failing check is `check`, and the values they have for it."""

    check: Check
    nodes: int
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Assessment:
    fitting: int
    misses: tuple[Miss, ...]  # in check order


def bit_or(masks: Iterable[int]) -> int:
    out = 0
    for mask in masks:
        out |= mask
    return out


def add_bit(table: dict[Any, int], key: object, bit: int) -> None:
    table[key] = table.get(key, 0) | bit


def clear_bit(table: dict[Any, int], key: object, bit: int) -> None:
    left = table.get(key, 0) & ~bit
    if left:
        table[key] = left
    else:
        table.pop(key, None)
