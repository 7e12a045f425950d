"""The webhook as an async context manager: bind, serve, and on exit drain what is in flight
before the background tasks stop. With `freeze_gc`, gc.freeze() once the start-up data is in:
the policies at once, the node cache's first list when it is on (issue 47)."""

from __future__ import annotations

import asyncio
import gc
import logging
from types import TracebackType

from aiohttp import web

from common.http_site import start_site
from webhook.server.app import STATE, ServerConfig, WebhookState, build_app
from webhook.server.pod_admission import MutateFn

__all__ = ["WebhookServer"]

logger = logging.getLogger("webhook.server.app")

# The longest gc.freeze() waits for the node cache's first list (an API server refusing the
# list for good must not leave the collector rescanning the start-up objects forever).
FREEZE_WAIT_S = 120.0


async def freeze_when_loaded(state: WebhookState, wait_s: float = FREEZE_WAIT_S) -> None:
    """gc.freeze() after the node cache's first list, or `wait_s`: everything loaded by then
    lives until exit, and a full collection need not rescan it (admission allocates many
    short-lived dicts). Frozen before the list, the whole index stayed in the scanned set."""
    if state.nodes is not None:
        try:
            async with asyncio.timeout(wait_s):
                await state.nodes.listed.wait()
        except TimeoutError:
            logger.info("gc.freeze() without the node cache: its first list is not in yet")
    gc.freeze()


class WebhookServer:
    """The webhook as an async context manager: `port`, `url` and `state` once entered."""

    def __init__(
        self, config: ServerConfig, *, mutate: MutateFn | None = None, freeze_gc: bool = False
    ) -> None:
        self.config = config
        self._mutate = mutate
        self._freeze_gc = freeze_gc  # `serve` only: tests share one process
        self._freezing: asyncio.Task[None] | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.state: WebhookState | None = None

    @property
    def metrics_port(self) -> int | None:
        return self.state.metrics_port if self.state is not None else None

    @property
    def url(self) -> str:
        host = self.config.host
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        return f"https://{host}:{self.port}/mutate"

    async def __aenter__(self) -> WebhookServer:
        app = build_app(self.config, mutate=self._mutate)
        self.state = app[STATE]
        tls = self.state.tls
        if tls is None:  # build_app always sets it; this keeps the type checker honest
            raise RuntimeError("TLS context missing")
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=self.config.shutdown_timeout)
        # setup() starts the cleanup_ctx lifecycles (watchers, metrics)
        self.port = await start_site(
            runner, self.config.host, self.config.port, ssl_context=tls.listening, backlog=1024
        )
        self._runner = runner
        if self._freeze_gc:
            self._freezing = asyncio.create_task(freeze_when_loaded(self.state), name="gc-freeze")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        runner, self._runner = self._runner, None
        if self._freezing is not None:
            self._freezing.cancel()
        if runner is None or self.state is None:
            return
        # Refuse new connections, then let running admissions finish, including ones whose
        # body is still arriving (aiohttp's own shutdown drops data received after it
        # starts), then close keep-alive connections and stop the background tasks.
        for site in list(runner.sites):
            await site.stop()
        state = self.state
        if state.in_flight:
            state.drained = asyncio.Event()
            try:
                async with asyncio.timeout(self.config.shutdown_timeout):
                    await state.drained.wait()
            except TimeoutError:
                logger.warning(
                    "shutdown timeout: abandoning in-flight admissions",
                    extra={"in_flight": state.in_flight},
                )
        await runner.cleanup()
