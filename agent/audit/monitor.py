"""The audit inside `topoplace-agent run`: Prometheus series refreshed on an interval and as
soon as the kubelet's socket is (re)created.

Series (on the agent's own registry):
- `topoplace_agent_gpu_container_alignment{namespace, pod, container, verdict}` = 1 per running
  GPU container; a container's series goes when the container does (cardinality: the GPU
  containers of one node);
- `topoplace_agent_gpu_containers{verdict}`: how many containers have each verdict;
- `topoplace_agent_pod_resources_up`: 1 when the last `List` answered, else 0 — then the
  per-container series are dropped (stale verdicts would mislead) and the counts read 0;
- with a LocalityProbe (agent.audit.probe), per GPU pod:
  `topoplace_agent_pod_memory_locality{namespace, pod, verdict}` = 1 (`local`, `remote`,
  `unknown`), `topoplace_agent_pod_memory_local_ratio{namespace, pod}` and
  `topoplace_agent_pod_cpu_local_ratio{namespace, pod}` (0..1, only when measured); per
  verdict `topoplace_agent_gpu_pods_memory_locality{verdict}`; per NUMA node
  `topoplace_agent_numa_remote_allocation_ratio{numa_node}` (only when known). Cardinality:
  3 series per GPU pod of the node, 1 per NUMA node, 3 counts.
A socket that is absent, refused or answers garbage is logged once per distinct reason; the
labelling goes on regardless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence

from prometheus_client import CollectorRegistry, Gauge

from agent.audit.facts import AuditOptions, Machine, audit, list_pods, read_machine
from agent.audit.locality import locality_counts
from agent.audit.measure import PodRef
from agent.audit.probe import LocalityProbe, LocalityReport
from agent.audit.render import counts
from agent.audit.verdict import ContainerAudit
from agent.discovery.discover import DiscoveryError
from agent.sources.podresources import PodResourcesError
from common.backoff import sleep_until_set

__all__ = ["AuditMetrics", "AuditMonitor", "LocalityMetrics"]

log = logging.getLogger(__name__)

_Key = tuple[str, str, str, str]


class AuditMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.alignment = Gauge(
            "topoplace_agent_gpu_container_alignment",
            "1 for each running GPU container, labelled with its alignment verdict",
            ["namespace", "pod", "container", "verdict"],
            registry=registry,
        )
        self.by_verdict = Gauge(
            "topoplace_agent_gpu_containers",
            "Running GPU containers by alignment verdict",
            ["verdict"],
            registry=registry,
        )
        self.up = Gauge(
            "topoplace_agent_pod_resources_up",
            "1 when the kubelet's PodResources List answered on the last audit",
            registry=registry,
        )
        self.last_audit = Gauge(
            "topoplace_agent_last_audit_timestamp_seconds",
            "Unix time of the last audit that read PodResources",
            registry=registry,
        )
        self._series: set[_Key] = set()
        self._locality = LocalityMetrics(registry)
        self.publish(())
        self.up.set(0)

    def publish(self, audits: Sequence[ContainerAudit], *, at: float | None = None) -> None:
        now = {(a.namespace, a.pod, a.container, a.verdict) for a in audits}
        for gone in self._series - now:  # pods that ended, or a verdict that changed
            self.alignment.remove(*gone)
        for key in now:
            self.alignment.labels(*key).set(1)
        self._series = now
        for verdict, n in counts(audits).items():
            self.by_verdict.labels(verdict=verdict).set(n)
        if at is not None:
            self.up.set(1)
            self.last_audit.set(at)

    def publish_locality(self, report: LocalityReport) -> None:
        self._locality.publish(report)

    def unavailable(self) -> None:
        self.publish(())
        self._locality.publish(LocalityReport(pods=()))
        self.up.set(0)


class LocalityMetrics:
    """The measured-locality series; each pod's go when the pod does."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.verdict = Gauge(
            "topoplace_agent_pod_memory_locality",
            "1 for each GPU pod, labelled with its measured memory locality verdict",
            ["namespace", "pod", "verdict"],
            registry=registry,
        )
        self.memory = Gauge(
            "topoplace_agent_pod_memory_local_ratio",
            "Share of the GPU pod's memory pages on its GPUs' NUMA nodes (0..1)",
            ["namespace", "pod"],
            registry=registry,
        )
        self.cpu = Gauge(
            "topoplace_agent_pod_cpu_local_ratio",
            "Share of the CPUs the GPU pod may use that are on its GPUs' NUMA nodes (0..1)",
            ["namespace", "pod"],
            registry=registry,
        )
        self.counts = Gauge(
            "topoplace_agent_gpu_pods_memory_locality",
            "GPU pods by measured memory locality verdict",
            ["verdict"],
            registry=registry,
        )
        self.node_remote = Gauge(
            "topoplace_agent_numa_remote_allocation_ratio",
            "Share of the NUMA node's page allocations in the last window made for a task on "
            "another node's CPU (numastat other_node / (local_node + other_node))",
            ["numa_node"],
            registry=registry,
        )
        self._series: dict[Gauge, set[tuple[str, ...]]] = {}
        self.publish(LocalityReport(pods=()))

    def _keep(self, gauge: Gauge, values: dict[tuple[str, ...], float]) -> None:
        for gone in self._series.get(gauge, set()) - values.keys():
            gauge.remove(*gone)
        for key, value in values.items():
            gauge.labels(*key).set(value)
        self._series[gauge] = set(values)

    def publish(self, report: LocalityReport) -> None:
        pods = report.pods
        self._keep(self.verdict, {(p.namespace, p.pod, p.verdict): 1 for p in pods})
        self._keep(self.memory, {(p.namespace, p.pod): p.memory_share for p in pods
                                 if p.memory_share is not None})  # fmt: skip
        self._keep(self.cpu, {(p.namespace, p.pod): p.cpu_share for p in pods
                              if p.cpu_share is not None})  # fmt: skip
        self._keep(self.node_remote, {(str(n),): share for n, share in report.node_remote.items()
                                      if share is not None})  # fmt: skip
        for verdict, n in locality_counts(pods).items():
            self.counts.labels(verdict=verdict).set(n)


class AuditMonitor:
    """`await monitor.run(stop)`: audit every `interval` seconds and on socket changes."""

    def __init__(
        self,
        options: AuditOptions,
        metrics: AuditMetrics,
        *,
        interval: float = 10.0,
        machine_interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        probe: LocalityProbe | None = None,
        refs: Callable[[], Iterable[PodRef]] = list,
    ) -> None:
        self._options = options
        self._probe = probe
        self._refs = refs
        self._locality_failed: str | None = None
        self._metrics = metrics
        self._interval = interval
        self._machine_interval = machine_interval
        self._clock = clock
        self._machine: Machine | None = None
        self._machine_at = 0.0
        self._reported: str | None = None  # the failure last logged: each one once
        self._poked = asyncio.Event()
        self._seen: set[tuple[str, str, str, str]] = set()

    def poke(self) -> None:
        self._poked.set()

    def _machine_now(self) -> Machine:
        due = self._clock() - self._machine_at >= self._machine_interval
        if self._machine is None or due:
            self._machine = read_machine(self._options)
            self._machine_at = self._clock()
        return self._machine

    def _report(self, problem: str | None) -> None:
        if problem is None:
            if self._reported is not None:
                log.info("PodResources readable again; auditing GPU containers")
            self._reported = None
        elif problem != self._reported:
            log.warning("no placement audit: %s (labelling continues)", problem)
            self._reported = problem

    async def refresh(self) -> tuple[ContainerAudit, ...] | None:
        """One audit; None (and series dropped) when PodResources or the hardware is unread."""
        self._poked.clear()
        try:
            machine = await asyncio.to_thread(self._machine_now)
            pods = await asyncio.to_thread(list_pods, self._options)
        except (PodResourcesError, DiscoveryError, OSError) as e:
            self._report(str(e))
            self._metrics.unavailable()
            return None
        audits = audit(machine, pods)
        self._report(None)
        self._log_new(audits)
        self._metrics.publish(audits, at=time.time())
        if self._probe is not None:
            refs = list(self._refs())  # on the loop: the pod watch feeds it there
            try:
                report = await asyncio.to_thread(
                    self._probe.measure, machine.topology, audits, refs
                )
            except (OSError, ValueError) as e:  # the readers raise none; never stop the audit
                if self._locality_failed != str(e):
                    log.warning("no memory locality this audit: %s", e)
                self._locality_failed = str(e)
                report = LocalityReport(pods=())
            else:
                self._locality_failed = None
            self._metrics.publish_locality(report)
        return audits

    def _log_new(self, audits: Sequence[ContainerAudit]) -> None:
        """One log line per container and verdict that was not there on the last audit."""
        seen = {(a.namespace, a.pod, a.container, a.verdict) for a in audits}
        for a in audits:
            key = (a.namespace, a.pod, a.container, a.verdict)
            if key in self._seen or a.verdict == "aligned":
                continue
            log.warning(
                "GPU container %s/%s/%s: %s: %s",
                a.namespace,
                a.pod,
                a.container,
                a.verdict,
                a.reason,
                extra={"namespace": a.namespace, "pod": a.pod, "verdict": a.verdict},
            )
        self._seen = seen

    async def _watch_socket_dir(self, stop: asyncio.Event) -> None:
        from watchfiles import awatch

        directory = self._options.socket.parent
        while not stop.is_set():
            try:
                # The kubelet creates the socket under a temporary name, then renames it.
                async for _ in awatch(
                    directory,
                    watch_filter=None,
                    stop_event=stop,
                    debounce=200,
                    rust_timeout=1000,
                    recursive=False,
                ):
                    self.poke()
            except (FileNotFoundError, OSError, RuntimeError):
                pass  # no directory (yet): the interval covers it
            if not stop.is_set():
                # not self._wait: a pending poke would make this spin
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._interval)

    async def _wait(self, delay: float, stop: asyncio.Event) -> None:
        await sleep_until_set(asyncio.sleep, delay, stop, self._poked)

    async def run(self, stop: asyncio.Event) -> None:
        watcher = asyncio.create_task(self._watch_socket_dir(stop))
        try:
            while not stop.is_set():
                await self.refresh()
                await self._wait(self._interval, stop)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
