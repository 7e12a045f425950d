"""One locality pass of the audit: measure the GPU pods, judge them, read the node counters.

Blocking (file reads); `run`'s monitor calls it in a thread, the `audit` command directly.
A pod that turns `remote` or `unknown` is logged once, with its reason, until its verdict
changes; the node counters' problems are logged once each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.audit.locality import DEFAULT_THRESHOLD, PodLocality, gpu_pods, localities
from agent.audit.measure import PodNuma, PodRef, measure_pods
from agent.audit.node_rates import RemoteRates
from agent.audit.verdict import ContainerAudit
from agent.discovery.topology import Topology
from agent.sources.numa_stat import node_counters

__all__ = ["FALLBACK_INTERVAL", "LocalityProbe", "LocalityReport"]

log = logging.getLogger(__name__)

# A pod measured through numa_maps (no memory cgroup) is re-read at most this often: the
# kernel walks each process's page tables to print it.
FALLBACK_INTERVAL = 60.0


@dataclass(frozen=True, slots=True)
class LocalityReport:
    pods: tuple[PodLocality, ...]
    node_remote: Mapping[int, float | None] = field(default_factory=dict)  # NUMA node → share


class LocalityProbe:
    def __init__(
        self,
        *,
        sysfs_root: Path,
        proc_root: Path,
        threshold: float = DEFAULT_THRESHOLD,
        rates: RemoteRates | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sysfs_root = sysfs_root
        self._proc_root = proc_root
        self.threshold = threshold
        self._rates = rates
        self._seen: set[tuple[str, str, str]] = set()
        self._node_problems: tuple[str, ...] = ()
        self._clock = clock
        # numa_maps readings (the costly fallback), reused for FALLBACK_INTERVAL seconds
        self._fallback: dict[tuple[str, str], tuple[float, PodNuma]] = {}

    def measure(
        self, topology: Topology, audits: Sequence[ContainerAudit], refs: Iterable[PodRef]
    ) -> LocalityReport:
        wanted = {key: tuple(c) for key, c in gpu_pods(audits).items()}
        now = self._clock()
        fresh = {k: r for k, (at, r) in self._fallback.items()
                 if k in wanted and now - at < FALLBACK_INTERVAL}  # fmt: skip
        readings = measure_pods(self._sysfs_root, self._proc_root, refs, wanted, cached=fresh)
        self._fallback = {
            k: (self._fallback[k][0] if k in fresh else now, r)
            for k, r in readings.items()
            if isinstance(r, PodNuma) and r.source == "numa_maps"
        }
        previous = {(ns, pod): verdict for ns, pod, verdict in self._seen}
        pods = localities(audits, readings, topology, threshold=self.threshold, previous=previous)
        self._log_new(pods)
        node_remote: Mapping[int, float | None] = {}
        if self._rates is not None:
            counters, problems = node_counters(self._sysfs_root)
            for problem in sorted(set(problems) - set(self._node_problems)):
                log.warning("NUMA node counters unreadable: %s", problem)
            self._node_problems = problems
            node_remote = self._rates.sample(counters)
        return LocalityReport(pods=pods, node_remote=node_remote)

    def _log_new(self, pods: Sequence[PodLocality]) -> None:
        # _seen holds every pod's last verdict: the log's memory and the hysteresis' input.
        now = {(p.namespace, p.pod, p.verdict) for p in pods}
        for p in pods:
            if p.verdict == "local" or (p.namespace, p.pod, p.verdict) in self._seen:
                continue
            log.warning(
                "GPU pod %s/%s: memory locality %s: %s",
                p.namespace,
                p.pod,
                p.verdict,
                p.reason,
                extra={"namespace": p.namespace, "pod": p.pod, "locality": p.verdict},
            )
        self._seen = now
