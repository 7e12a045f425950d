"""Each NUMA node's recent remote-allocation share, from its `numastat` counters (pure state).

For NUMA node N over a window: `other_node / (local_node + other_node)` of the pages allocated
on N in that window, that is the share of N's new pages that went to a task running on another
node's CPU: cross-node traffic into N's memory. Reading node-wide counters says nothing about
which pod caused it; the per-pod view is agent.audit.locality.

Bounded churn, by design:
- a figure moves only when a window of at least `window` seconds has passed since the last
  one (so at most once per window);
- a node that allocated fewer than `min_pages` pages in the window keeps its last figure
  (an idle node, or one that idles after a job, does not drift to noise);
- a counter that went backwards (a reset: node hot-remove and re-add, a counter that
  wrapped) makes that node unknown for the window and restarts from the new values, with one
  log line; a node whose counters vanish is unknown.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from agent.sources.numa_stat import NODE_COUNTERS, NodeCounters

__all__ = ["DEFAULT_MIN_PAGES", "DEFAULT_WINDOW", "RemoteRates", "percent"]

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 60.0
# 64 MiB of 4 KiB pages per window: below that the share is a handful of page faults.
DEFAULT_MIN_PAGES = 16384


def percent(share: float | None, step: int = 5) -> int | None:
    """A share as a whole percent rounded to `step` (what is published: coarse on purpose,
    so that noise does not rewrite the NodeResourceTopology)."""
    if share is None:
        return None
    return min(100, max(0, round(share * 100 / step) * step))


class RemoteRates:
    def __init__(
        self,
        *,
        window: float = DEFAULT_WINDOW,
        min_pages: int = DEFAULT_MIN_PAGES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window = window
        self._min_pages = min_pages
        self._clock = clock
        self._base: Mapping[int, NodeCounters] | None = None
        self._base_at = 0.0
        self._shares: dict[int, float | None] = {}
        # The audit and the NodeResourceTopology publisher sample from their own threads.
        self._lock = threading.Lock()

    @property
    def shares(self) -> Mapping[int, float | None]:
        """NUMA node → remote share 0..1 of the last full window; None when unknown."""
        return dict(self._shares)

    def sample(self, counters: Mapping[int, NodeCounters]) -> Mapping[int, float | None]:
        """Feed one reading of every node's counters; returns `shares`."""
        with self._lock:
            return self._sample(counters)

    def _sample(self, counters: Mapping[int, NodeCounters]) -> Mapping[int, float | None]:
        now = self._clock()
        if self._base is None:
            self._base, self._base_at = counters, now
            self._shares = dict.fromkeys(counters)
            return self.shares
        if now - self._base_at < self._window:
            return self.shares
        shares: dict[int, float | None] = {}
        for node, new in counters.items():
            old = self._base.get(node)
            if old is None:
                shares[node] = None  # a node that appeared: its first window starts now
                continue
            deltas = {c: getattr(new, c) - getattr(old, c) for c in NODE_COUNTERS}
            if any(d < 0 for d in deltas.values()):
                log.warning(
                    "NUMA node %d: allocation counters went backwards (a reset); remote "
                    "share unknown for this window",
                    node,
                )
                shares[node] = None
                continue
            pages = deltas["local_node"] + deltas["other_node"]
            if pages < self._min_pages:
                shares[node] = self._shares.get(node)
            else:
                shares[node] = deltas["other_node"] / pages
        self._shares = shares
        self._base, self._base_at = counters, now
        return self.shares
