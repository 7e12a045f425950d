"""Prometheus metrics of one webhook server, served on a separate plain-HTTP port.

Each server owns its CollectorRegistry (no process-global default registry), so several
servers can run in one test process. Label cardinality is bounded: `policy` is a name from
the loaded set, `none` for pods that did not opt in, or `unknown`.

Metrics (prefix `topoplace_webhook_`):
- `admission_requests_total{outcome,policy}`: outcome is one of `OUTCOMES`.
- `admission_duration_seconds`: histogram of handler latency, buckets from 0.1 ms.
- `admission_warnings_total{kind,policy}`: warning lines sent, `kind` one of
  `webhook.warnings.kinds.WarningKind`; zero for every kind and loaded policy from the load on.
- `policy_set_generation`: increments on every policy set swap; `policy_set_info{hash}`;
  `policies_loaded`: number of policies in the serving set.
- `policy_reload_errors_total`: refused policy sets.
- `tls_reloads_total{result}`: `ok` or `error`.
- `scheduler_predictions_total{outcome}` (`serve --numa-scheduling`): the extender's
  predictions of where the kubelet puts a bound pod, judged when the node's
  NodeResourceTopology shows it: `right`, `other_numa_nodes`, or `refused` (the kubelet
  refused a pod the extender let through); zero for each from the start.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from typing import Final

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Info,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from common.http_site import start_site
from webhook.scheduler.accounting import OUTCOMES as PREDICTION_OUTCOMES
from webhook.warnings.kinds import WarningKind

__all__ = ["LATENCY_BUCKETS", "OUTCOMES", "PREDICTION_OUTCOMES", "WebhookMetrics", "serve_metrics"]

OUTCOMES: Final = ("mutated", "unchanged", "passthrough", "denied", "failed_open", "malformed")
LATENCY_BUCKETS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
)
_PREFIX: Final = "topoplace_webhook_"


def _counters(
    name: str, documentation: str, labels: list[str], counts: Mapping[tuple[str, str], int]
) -> CounterMetricFamily:
    family = CounterMetricFamily(_PREFIX + name, documentation, labels=labels)
    for values, count in counts.items():
        family.add_metric(list(values), count)
    return family


class _AdmissionCollector(Collector):
    """The two per-request instruments as plain counts, turned into samples at scrape.

    prometheus_client's Counter and Histogram take a lock and walk the buckets on every
    observation; the admission path is one event-loop thread, and the scrape runs in that
    same loop, so plain ints are exact here and several times cheaper per request.
    """

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str], int] = {}
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # per bucket, the last one +Inf
        self.total = 0.0
        self.warnings: dict[tuple[str, str], int] = {}  # (kind, policy) -> lines sent

    def observe(
        self, outcome: str, policy: str, seconds: float, warned: tuple[WarningKind, ...]
    ) -> None:
        key = (outcome, policy)
        self.requests[key] = self.requests.get(key, 0) + 1
        self.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds
        for kind in warned:
            key = (kind.value, policy)
            self.warnings[key] = self.warnings.get(key, 0) + 1

    def known_policies(self, names: tuple[str, ...]) -> None:
        """Zeros for every kind of a newly loaded policy, so a panel and a rate see the
        series before the first warning (kinds × policies: bounded by the loaded set)."""
        for name in names:
            for kind in WarningKind:
                self.warnings.setdefault((kind.value, name), 0)

    def collect(self) -> Iterator[Metric]:
        yield _counters(
            "admission_requests",
            "Admission requests answered, by outcome and policy",
            ["outcome", "policy"],
            self.requests,
        )
        yield _counters(
            "admission_warnings",
            "Admission warning lines sent, by kind and policy",
            ["kind", "policy"],
            self.warnings,
        )
        cumulative, running = [], 0
        for bound, count in zip((*LATENCY_BUCKETS, float("inf")), self.buckets, strict=True):
            running += count
            cumulative.append((floatToGoString(bound), running))
        yield HistogramMetricFamily(
            _PREFIX + "admission_duration_seconds",
            "Time from request received to response ready",
            buckets=cumulative,
            sum_value=self.total,
        )


class WebhookMetrics:
    """The server's instruments; `admission()` is the only call on the request path."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._admissions = _AdmissionCollector()
        r.register(self._admissions)
        self._generation = Gauge(
            _PREFIX + "policy_set_generation",
            "Increments each time a new policy set starts serving",
            registry=r,
        )
        self._set_info = Info(
            _PREFIX + "policy_set", "Content hash of the serving policy set", registry=r
        )
        self._loaded = Gauge(_PREFIX + "policies_loaded", "Policies in the serving set", registry=r)
        self._reload_errors = Counter(
            _PREFIX + "policy_reload_errors",
            "Policy sets refused because a file was invalid (the last good set kept serving)",
            registry=r,
        )
        self._tls_reloads = Counter(
            _PREFIX + "tls_reloads", "TLS key pair reload attempts", ["result"], registry=r
        )
        self._predictions = Counter(
            _PREFIX + "scheduler_predictions",
            "The extender's predictions of the kubelet's NUMA placement, by how they turned out",
            ["outcome"],
            registry=r,
        )
        for outcome in PREDICTION_OUTCOMES:
            self._predictions.labels(outcome=outcome)
        self._known: frozenset[str] = frozenset()

    def policy_set_loaded(self, generation_hash: str, names: tuple[str, ...]) -> None:
        self._generation.inc()
        self._set_info.info({"hash": generation_hash})
        self._loaded.set(len(names))
        self._known = frozenset(names)
        self._admissions.known_policies(names)

    def policy_reload_failed(self) -> None:
        self._reload_errors.inc()

    def scheduler_prediction(self, outcome: str) -> None:
        self._predictions.labels(outcome=outcome).inc()

    def tls_reloaded(self, ok: bool) -> None:
        self._tls_reloads.labels(result="ok" if ok else "error").inc()

    def admission(
        self,
        outcome: str,
        policy: str | None,
        seconds: float,
        warned: tuple[WarningKind, ...] = (),
    ) -> None:
        if policy is None:
            label = "none"
        elif policy in self._known:
            label = policy
        else:
            label = "unknown"
        self._admissions.observe(outcome, label, seconds, warned)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


@asynccontextmanager
async def serve_metrics(metrics: WebhookMetrics, *, host: str, port: int) -> AsyncIterator[int]:
    """Serve GET /metrics over plain HTTP; yields the bound port (port 0 picks a free one)."""

    async def handle(_request: web.Request) -> web.Response:
        return web.Response(
            body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/metrics", handle)
    runner = web.AppRunner(app, access_log=None)
    bound = await start_site(runner, host, port)
    try:
        yield bound
    finally:
        await runner.cleanup()
