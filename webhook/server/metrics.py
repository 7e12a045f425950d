"""Prometheus metrics of one webhook server, served on a separate plain-HTTP port.

Each server owns its CollectorRegistry (no process-global default registry), so several
servers can run in one test process. Label cardinality is bounded: `policy` is a name from
the loaded set, `none` for pods that did not opt in, or `unknown`.

Metrics (prefix `topoplace_webhook_`):
- `admission_requests_total{outcome,policy}`: outcome is one of `OUTCOMES`.
- `admission_duration_seconds`: histogram of handler latency, buckets from 0.1 ms.
- `policy_set_generation`: increments on every policy set swap; `policy_set_info{hash}`;
  `policies_loaded`: number of policies in the serving set.
- `policy_reload_errors_total`: refused policy sets.
- `tls_reloads_total{result}`: `ok` or `error`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)

__all__ = ["LATENCY_BUCKETS", "OUTCOMES", "WebhookMetrics", "serve_metrics"]

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


class WebhookMetrics:
    """The server's instruments; `admission()` is the only call on the request path."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._requests = Counter(
            _PREFIX + "admission_requests",
            "Admission requests answered, by outcome and policy",
            ["outcome", "policy"],
            registry=r,
        )
        self._latency = Histogram(
            _PREFIX + "admission_duration_seconds",
            "Time from request received to response ready",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
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
        self._known: frozenset[str] = frozenset()
        # labels() takes a lock and builds a tuple; cache the children for the hot path.
        self._children: dict[tuple[str, str], Counter] = {}

    def policy_set_loaded(self, generation_hash: str, names: tuple[str, ...]) -> None:
        self._generation.inc()
        self._set_info.info({"hash": generation_hash})
        self._loaded.set(len(names))
        self._known = frozenset(names)

    def policy_reload_failed(self) -> None:
        self._reload_errors.inc()

    def tls_reloaded(self, ok: bool) -> None:
        self._tls_reloads.labels(result="ok" if ok else "error").inc()

    def admission(self, outcome: str, policy: str | None, seconds: float) -> None:
        if policy is None:
            label = "none"
        elif policy in self._known:
            label = policy
        else:
            label = "unknown"
        key = (outcome, label)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._requests.labels(outcome=outcome, policy=label)
        child.inc()
        self._latency.observe(seconds)

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
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        yield int(runner.addresses[0][1])
    finally:
        await runner.cleanup()
