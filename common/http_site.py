"""Start an aiohttp site on a runner and read back the port it bound (one way for every server).

Port 0 picks a free port, read back from the runner, never bound-then-closed first. On any
failure (the port taken, an address not ours) the runner is cleaned up before the error goes
on, so a caller that did not start cannot leak its lifecycles.
"""

from __future__ import annotations

import ssl

from aiohttp import web

__all__ = ["start_site"]


async def start_site(
    runner: web.AppRunner,
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    backlog: int = 128,
) -> int:
    """`runner.setup()`, then a TCP site on host:port; returns the bound port. A setup that
    fails part way (one of the app's cleanup contexts raising) is cleaned up too, so the
    contexts that did start are stopped."""
    try:
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context, backlog=backlog)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return int(runner.addresses[0][1])
