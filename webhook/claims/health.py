"""`/healthz` and `/readyz` of the claim-templates command, for the kubelet's probes.

Alive while the process serves; ready once a pass has brought the templates in line with the
policies and the last pass succeeded (an API server it cannot reach makes it unready, so
`kubectl get pods` shows the problem).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

__all__ = ["health_app"]


def health_app(ready: Callable[[], bool]) -> web.Application:
    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_request: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="templates not reconciled yet\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
