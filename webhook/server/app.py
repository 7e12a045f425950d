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
from dataclasses import dataclass

from aiohttp import web

from common.logsetup import log_fields
from webhook import jsonio
from webhook.server.assembly import (
    DEFAULT_MAX_BODY_BYTES,
    ServerConfig,
    build_admitter,
    build_parts,
    start_tasks,
)
from webhook.server.metrics import WebhookMetrics, serve_metrics
from webhook.server.pod_admission import (
    FAILED_OPEN_WARNED,
    Admission,
    Admitter,
    MutateFn,
    build_response,
)
from webhook.server.reload import PolicyStore
from webhook.server.review import MalformedReview, parse_review
from webhook.server.tls import TlsReloader
from webhook.stores.claim_template_store import ClaimTemplateStore
from webhook.stores.node_store import NodeStore

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
    nodes: NodeStore | None = None
    templates: ClaimTemplateStore | None = None


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
    parts = build_parts(config)
    state = WebhookState(
        build_admitter(parts, config, mutate),
        parts.metrics,
        parts.store,
        parts.tls,
        config.max_body_bytes,
        nodes=parts.nodes,
        templates=parts.templates,
    )
    app = make_app(state)
    if parts.numa is not None:
        parts.numa.add_routes(app)

    async def background(_app: web.Application) -> AsyncIterator[None]:
        tasks = start_tasks(parts, config)
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
        async with serve_metrics(parts.metrics, host=host, port=config.metrics_port) as port:
            state.metrics_port = port
            yield

    app.cleanup_ctx.append(background)
    app.cleanup_ctx.append(metrics_listener)
    return app
