"""The HTTPS admission server: aiohttp transport around the `Admitter` protocol.

Routes: `POST /mutate` (and `/mutate/`), `GET /healthz` (process alive), `GET /readyz`
(policies loaded and TLS ready). Metrics are served on a separate plain-HTTP port.

Error channels: a malformed review or an oversized body is answered HTTP 400 with a
plain-text message; a policy denial is a normal 200 AdmissionReview with `allowed: false`.

Use as an async context manager (binds on enter, drains in-flight requests on exit):

    async with WebhookServer(config) as server:
        print(server.url)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from aiohttp import web

from common.logsetup import log_fields
from webhook import jsonio
from webhook.engine.mutation import EngineSettings
from webhook.scheduler.service import NumaScheduling
from webhook.scheduler.workload_api import WorkloadApi
from webhook.server.admission import (
    FAILED_OPEN_WARNED,
    Admission,
    Admitter,
    MutateFn,
    PolicyAdmitter,
    build_response,
)
from webhook.server.answer_cache import CachedAdmitter
from webhook.server.cert_expiry import CertificateExpiry
from webhook.server.metrics import WebhookMetrics, serve_metrics
from webhook.server.node_cache import NodeCache
from webhook.server.reload import PolicyStore, PolicyWatcher
from webhook.server.review import MalformedReview, parse_review
from webhook.server.template_cache import TemplateCache
from webhook.server.tls import TlsReloader
from webhook.server.workload_admission import WorkloadAdmitter
from webhook.spans.watch import WorkloadSpans
from webhook.warnings.placement import PlacementWarnings

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "STATE",
    "ServerConfig",
    "WebhookState",
    "build_app",
    "make_app",
]

logger = logging.getLogger(__name__)
access_logger = logging.getLogger("webhook.access")

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024  # a large Pod is ~100 KiB; etcd caps objects at 1.5 MiB


@dataclass(frozen=True, slots=True)
class ServerConfig:
    policies_dir: Path
    cert_path: Path
    key_path: Path
    host: str = "0.0.0.0"
    port: int = 8443
    metrics_host: str | None = None  # default: same as host
    metrics_port: int | None = 9102  # None: no metrics listener; 0: any free port
    settings: EngineSettings = field(default_factory=EngineSettings)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    tls_reload_interval: float = 10.0
    policy_poll_interval: float = 10.0
    # Below the default 30 s terminationGracePeriodSeconds, so in-flight requests finish.
    shutdown_timeout: float = 20.0
    # Watch every node and warn at admission when a mutated pod fits none (node_cache.py).
    node_cache: bool = False
    kubeconfig: Path | None = None  # for the caches; None: in-cluster or $KUBECONFIG
    claim_template_cache: bool = False  # DRA templates not there yet: fallback (template_cache)
    # NodeResourceTopology watch, the scheduler extender routes, scheduler Lease checks.
    numa_scheduling: bool = False
    lease_check_interval: float = 10.0  # how often a named scheduler's Lease is read
    # The extender's ledger of pods bound but not shown yet (issue 45); off only to measure.
    scheduler_accounting: bool = True
    # Watch the placed pods that opted in: the per-workload audit as metrics (needs node_cache).
    workload_spans: bool = False
    # Look at the Workload API and its gates (scheduler/workload_api.py): keepTogether
    # through PodGroups where the cluster keeps gangs together itself.
    workload_api: bool = False


# Mutable on purpose: the metrics port is only known once the listener has started.
@dataclass(slots=True)
class WebhookState:
    admitter: Admitter
    metrics: WebhookMetrics
    store: PolicyStore
    tls: TlsReloader | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    metrics_port: int | None = None
    # Graceful shutdown: admissions still running, and the event set when they reach zero.
    in_flight: int = 0
    drained: asyncio.Event | None = None
    nodes: NodeCache | None = None
    templates: TemplateCache | None = None


STATE = web.AppKey("topoplace_state", WebhookState)


def _bad_request(state: WebhookState, started: float, message: str) -> web.Response:
    elapsed = time.perf_counter() - started
    state.metrics.admission("malformed", None, elapsed)
    fields = {"outcome": "malformed", "error": message, "latency_ms": round(elapsed * 1e3, 3)}
    log_fields(access_logger, "admission", fields)
    return web.Response(status=400, text=f"malformed AdmissionReview: {message}\n")


def _log(admission: Admission, uid: str, dry_run: bool, elapsed: float) -> None:
    """One INFO line on `webhook.access` per admission (common.logsetup.log_fields writes
    it without a LogRecord where that changes nothing)."""
    log_fields(
        access_logger,
        "admission",
        {
            "uid": uid,
            "namespace": admission.namespace,
            "pod": admission.pod_name,
            "policy": admission.policy,
            "outcome": admission.outcome,
            "patch_ops": admission.patch_ops,
            "dry_run": dry_run,
            "latency_ms": round(elapsed * 1e3, 3),
        },
    )


async def _mutate(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.in_flight += 1
    try:
        return await _admit(request, state)
    finally:
        state.in_flight -= 1
        if state.in_flight == 0 and state.drained is not None:
            state.drained.set()


async def _admit(request: web.Request, state: WebhookState) -> web.Response:
    started = time.perf_counter()
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _bad_request(
            state, started, f"body larger than the {state.max_body_bytes}-byte limit"
        )
    try:
        review = parse_review(body)
    except MalformedReview as exc:
        return _bad_request(state, started, str(exc))
    try:
        admission = state.admitter.admit(review)
    except MalformedReview as exc:
        return _bad_request(state, started, str(exc))
    except Exception:
        # The Admitter contract says this cannot happen; if it does, still fail open.
        logger.exception("admitter raised; admitting unchanged", extra={"uid": review.uid})
        review_out = build_response(review.uid, warnings=["internal error; admitted unchanged"])
        admission = Admission(
            review_out,
            "failed_open",
            namespace=review.namespace,
            warned=FAILED_OPEN_WARNED,
        )
    payload = admission.payload or jsonio.dumps(admission.review)
    elapsed = time.perf_counter() - started
    state.metrics.admission(admission.outcome, admission.policy, elapsed, admission.warned)
    _log(admission, review.uid, review.dry_run, elapsed)
    return web.Response(body=payload, content_type="application/json")


async def _healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    problems = []
    if state.store.current is None:
        problems.append("no policy set loaded")
    if state.tls is None or not state.tls.ready:
        problems.append("TLS not ready")
    if problems:
        return web.Response(status=503, text="; ".join(problems) + "\n")
    return web.Response(text="ready\n")


def make_app(state: WebhookState) -> web.Application:
    """The routes around `state`, with no background tasks (tests drive this in-process)."""
    app = web.Application(client_max_size=state.max_body_bytes)
    app[STATE] = state
    app.router.add_post("/mutate", _mutate)
    app.router.add_post("/mutate/", _mutate)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    return app


def build_app(config: ServerConfig, *, mutate: MutateFn | None = None) -> web.Application:
    """Load policies and TLS (raising PolicyLoadError / OSError / ssl.SSLError at startup),
    and register the watchers and the metrics listener as the app's lifecycle."""
    metrics = WebhookMetrics()
    store = PolicyStore()
    watcher = PolicyWatcher(
        config.policies_dir,
        store,
        on_swap=lambda s: metrics.policy_set_loaded(s.generation_hash, s.names),
        on_error=lambda _errors: metrics.policy_reload_failed(),
    )
    watcher.load_initial()
    tls = TlsReloader(config.cert_path, config.key_path, on_reload=metrics.tls_reloaded)
    metrics.registry.register(CertificateExpiry(config.cert_path))
    numa = (
        NumaScheduling(
            lambda: store.current,
            lease_interval=config.lease_check_interval,
            on_prediction=metrics.scheduler_prediction,
            accounting=config.scheduler_accounting,
        )
        if config.numa_scheduling
        else None
    )
    nodes = (
        NodeCache(zones=numa.zones if numa else None, stale=numa.ledger if numa else None)
        if config.node_cache
        else None
    )
    spans = WorkloadSpans(nodes.labels) if nodes is not None and config.workload_spans else None
    if spans is not None:
        metrics.registry.register(spans)
    fit_check = (
        PlacementWarnings(
            nodes=nodes.check if nodes is not None else None,
            scheduler_problem=numa.leases.problem if numa is not None else None,
        )
        if nodes is not None or numa is not None
        else None
    )
    workload_api = WorkloadApi() if config.workload_api else None
    templates = TemplateCache() if config.claim_template_cache else None
    settings = (
        replace(config.settings, claim_templates=templates.lookup) if templates else config.settings
    )
    pods = PolicyAdmitter(lambda: store.current, settings, mutate=mutate, fit_check=fit_check)

    def stamp() -> tuple[object, ...]:
        # Everything an answer depends on besides the request (answer_cache.py).
        return (
            store.current,
            nodes.stamp() if nodes is not None else None,
            templates.generation if templates is not None else None,
            numa.stamp() if numa is not None else None,
        )

    # Workloads first (a pod request pays one lookup there), then alike pods from one answer.
    admitter = WorkloadAdmitter(
        CachedAdmitter(pods, stamp),
        lambda: store.current,
        settings,
        carries=nodes.carries if nodes is not None else None,
        scheduling=(lambda: workload_api.current) if workload_api is not None else None,
    )
    state = WebhookState(
        admitter, metrics, store, tls, config.max_body_bytes, nodes=nodes, templates=templates
    )
    app = make_app(state)
    if numa is not None:
        numa.add_routes(app)

    async def background(_app: web.Application) -> AsyncIterator[None]:
        tasks = [
            asyncio.create_task(watcher.watch(config.policy_poll_interval), name="policy-watch"),
            asyncio.create_task(tls.watch(config.tls_reload_interval), name="tls-watch"),
        ]
        if nodes is not None:
            tasks.append(asyncio.create_task(nodes.run(config.kubeconfig), name="node-cache"))
        if spans is not None:
            tasks.append(asyncio.create_task(spans.run(config.kubeconfig), name="workload-spans"))
        if numa is not None:
            tasks += [asyncio.create_task(t) for t in numa.tasks(config.kubeconfig)]
        if workload_api is not None:
            tasks.append(
                asyncio.create_task(workload_api.run(config.kubeconfig), name="workload-api")
            )
        if templates is not None:
            tasks.append(
                asyncio.create_task(templates.run(config.kubeconfig), name="template-cache")
            )
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def metrics_listener(_app: web.Application) -> AsyncIterator[None]:
        if config.metrics_port is None:
            yield
            return
        host = config.metrics_host or config.host
        async with serve_metrics(metrics, host=host, port=config.metrics_port) as port:
            state.metrics_port = port
            yield

    app.cleanup_ctx.append(background)
    app.cleanup_ctx.append(metrics_listener)
    return app
