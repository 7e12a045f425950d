"""Dataset prefetches on this node, counted from the agent's pod watch (issue 35).

Each prefetch init container ends with a termination message (agent/cli/prefetch.py): on
success its `PrefetchReport` (a cache hit, or the bytes downloaded, and whether
`--max-cache-bytes` could not be kept because evicting did not free enough), on failure its
reason and a non-zero exit code. The kubelet puts that in the pod's status, so the agent of
the node counts every finished prefetch once:
- `topoplace_agent_dataset_prefetches_total{outcome}`: `hit`, `downloaded`, `failed`;
- `topoplace_agent_dataset_prefetch_bytes_total`: bytes downloaded into the cache;
- `topoplace_agent_dataset_cache_evictions_blocked_total`: prefetches that found the cache
  full and could not free enough, the rest leased by pods or being written (they downloaded
  anyway).
No label but `outcome` (three values); the monitor adds `node`. A restarted agent counts the
prefetches of pods still on the node once more, as the refusal count does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter

from agent.cache.progress import PrefetchReport, parse_report
from agent.sync.pod_events.once import SeenOnce
from common.cache_layout import PREFETCH_CONTAINER_PREFIX

__all__ = ["OUTCOMES", "FinishedPrefetch", "PrefetchCounts", "finished_prefetches"]

log = logging.getLogger(__name__)

OUTCOMES: Final = ("hit", "downloaded", "failed")


@dataclass(frozen=True, slots=True)
class FinishedPrefetch:
    key: str  # pod UID, container, restart: one termination
    exit_code: int
    report: PrefetchReport | None  # None for a failure, or a prefetcher that sent none


def _terminations(status: Mapping[str, Any]) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """(restart count, terminated state) of a container status: the current one and, after a
    restart, the one before (a watch can miss the short moment between them)."""
    restarts = int(status.get("restartCount") or 0)
    current = (status.get("state") or {}).get("terminated")
    if current:
        yield restarts, current
    before = (status.get("lastState") or {}).get("terminated")
    if before and restarts > 0:
        yield restarts - 1, before


def finished_prefetches(pod: Mapping[str, Any]) -> list[FinishedPrefetch]:
    """The terminated prefetch init containers of `pod` (pure). Raises ValueError, naming the
    container, for a report that does not parse."""
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    out: list[FinishedPrefetch] = []
    for status in statuses:
        name = str(status.get("name") or "")
        if not uid or not name.startswith(PREFETCH_CONTAINER_PREFIX):
            continue
        for restart, state in _terminations(status):
            code = int(state.get("exitCode") or 0)
            try:
                report = parse_report(str(state.get("message") or "")) if code == 0 else None
            except ValueError as exc:
                raise ValueError(f"init container {name}: {exc}") from None
            out.append(FinishedPrefetch(f"{uid}/{name}/{restart}", code, report))
    return out


class PrefetchCounts:
    """`observe(pod)` for every pod the watch sees; counts each termination once."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.prefetches = Counter(
            "topoplace_agent_dataset_prefetches",
            "Dataset prefetch init containers finished on this node, by outcome",
            ["outcome"],
            registry=registry,
        )
        for outcome in OUTCOMES:  # zeros, so a panel shows a node that never prefetched
            self.prefetches.labels(outcome=outcome)
        self.bytes = Counter(
            "topoplace_agent_dataset_prefetch_bytes",
            "Bytes dataset prefetches downloaded into this node's cache",
            registry=registry,
        )
        self.evictions_blocked = Counter(
            "topoplace_agent_dataset_cache_evictions_blocked",
            "Prefetches that could not evict enough to stay under --max-cache-bytes",
            registry=registry,
        )
        self._seen = SeenOnce()  # terminations, so a relist never counts one twice

    def observe(self, pod: Mapping[str, Any]) -> None:
        try:
            finished = finished_prefetches(pod)
        except ValueError as exc:
            name = (pod.get("metadata") or {}).get("name")
            log.warning("pod %s: %s; not counted", name, exc)
            return
        for done in finished:
            if self._seen.first(done.key):
                self._count(done)

    def _count(self, done: FinishedPrefetch) -> None:
        if done.exit_code != 0:
            self.prefetches.labels(outcome="failed").inc()
            return
        if done.report is None:  # exit 0 without a report: an older prefetcher, uncounted
            return
        self.prefetches.labels(outcome=done.report.outcome).inc()
        self.bytes.inc(done.report.bytes)
        if done.report.evictions_blocked:
            self.evictions_blocked.inc()
