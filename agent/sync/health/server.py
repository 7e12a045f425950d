"""Health, readiness and Prometheus metrics for `topoplace-agent run`.

`AgentMetrics.record` consumes the sync loop's events into a per-instance registry (no global
default registry, so tests and several agents in one process never collide). `HealthServer`
serves `/healthz` (the process answers), `/readyz` (200 once a reconcile has succeeded) and
`/metrics`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from agent.sync.labels.loop import Reconciled, SyncEvent
from agent.sync.labels.node_client import ApiCall
from common.http_site import start_site

__all__ = ["AgentMetrics", "HealthServer"]

log = logging.getLogger(__name__)


class AgentMetrics:
    """The agent's metrics and readiness, fed by `record(event)`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.ready = False
        self.reconciles = Counter(
            "topoplace_agent_reconciles",
            "Reconcile passes by result",
            ["result", "trigger"],
            registry=r,
        )
        self.api_requests = Counter(
            "topoplace_agent_api_requests",
            "Requests sent to the Kubernetes API server",
            ["verb", "outcome"],
            registry=r,
        )
        self.api_writes = Counter(
            "topoplace_agent_api_writes", "PATCH requests sent for the node", registry=r
        )
        self.nrt_writes = Counter(
            "topoplace_agent_nrt_writes",
            "NodeResourceTopology creates and patches sent for this node",
            registry=r,
        )
        self.label_changes = Counter(
            "topoplace_agent_label_changes", "Owned keys added, changed or removed", registry=r
        )
        self.owned_labels = Gauge(
            "topoplace_agent_owned_labels", "Owned labels the agent publishes", registry=r
        )
        self.last_sync = Gauge(
            "topoplace_agent_last_successful_sync_timestamp_seconds",
            "Unix time of the last reconcile that left the node in sync",
            registry=r,
        )
        self.discovery_seconds = Histogram(
            "topoplace_agent_discovery_duration_seconds",
            "Time to discover hardware and datasets",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        # Labels known up front so dashboards see zeros instead of absent series.
        for result in ("patched", "unchanged", "node_missing", "api_error", "discovery_error"):
            self.reconciles.labels(result=result, trigger="resync")

    def track_node_resource_topology(self) -> Callable[[], None]:
        """The NodeResourceTopology freshness gauge, only where the publisher runs (0 until its
        first success, so an alert sees one never published); returns its setter."""
        current = Gauge(
            "topoplace_agent_nrt_last_current_timestamp_seconds",
            "Unix time the node's NodeResourceTopology was last known to match PodResources",
            registry=self.registry,
        )
        return lambda: current.set(time.time())

    def record(self, event: SyncEvent) -> None:
        if isinstance(event, ApiCall):
            self.api_requests.labels(verb=event.verb, outcome=event.outcome).inc()
            if event.verb == "patch":
                self.api_writes.inc()
            return
        self._record_reconcile(event)

    def _record_reconcile(self, event: Reconciled) -> None:
        self.reconciles.labels(result=event.result, trigger=event.trigger).inc()
        if event.discovery_seconds is not None:
            self.discovery_seconds.observe(event.discovery_seconds)
        if event.synced:
            self.ready = True
            self.last_sync.set(event.at)
            self.owned_labels.set(event.owned_labels)
            self.label_changes.inc(len(event.changes))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


async def _healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


class HealthServer:
    """`async with HealthServer(metrics, host=..., port=...) as server:` then `server.port`."""

    def __init__(self, metrics: AgentMetrics, *, host: str, port: int) -> None:
        self._metrics = metrics
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def _readyz(self, _: web.Request) -> web.Response:
        if self._metrics.ready:
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready: no successful reconcile yet\n")

    async def _metrics_page(self, _: web.Request) -> web.Response:
        resp = web.Response(body=self._metrics.exposition())
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def __aenter__(self) -> HealthServer:
        app = web.Application()
        app.router.add_get("/healthz", _healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics_page)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        self.port = await start_site(runner, self._host, self._port)
        self._runner = runner
        log.info(
            "health and metrics listening on %s:%d",
            self._host,
            self.port,
            extra={"host": self._host, "port": self.port},
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
