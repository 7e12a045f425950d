"""Count each thing the pod watch sees once: a list, its relists and every MODIFIED event show
the same pod again, and a count must not grow with them."""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["SeenOnce"]


class SeenOnce:
    """`first(key)`: True the first time `key` is given, False after. Remembers the last
    `bound` keys, so memory stays bounded on a node that runs pods for months."""

    def __init__(self, bound: int = 4096) -> None:
        self._bound = bound
        self._seen: OrderedDict[str, None] = OrderedDict()

    def first(self, key: str) -> bool:
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > self._bound:
            self._seen.popitem(last=False)
        return True
