"""The floor: a bare aiohttp TLS server that reads the body and answers a constant allow.

Same TLS setup as the webhook (TLS ≥1.2, the same ECDSA key pair), same event loop; only the
admission logic is missing. Prints `listening: URL` once bound (port 0 allowed).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl

from aiohttp import web

_ALLOW = (
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",'
    b'"response":{"uid":"00000000-0000-0000-0000-000000000000","allowed":true}}'
)


async def _mutate(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=_ALLOW, content_type="application/json")


async def _serve(cert: str, key: str, port: int) -> None:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    app = web.Application()
    app.router.add_post("/mutate", _mutate)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx)
    await site.start()
    bound = runner.addresses[0][1]
    print(f"listening: https://127.0.0.1:{bound}/mutate", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tls-cert", required=True)
    parser.add_argument("--tls-key", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(_serve(args.tls_cert, args.tls_key, args.port))


if __name__ == "__main__":
    main()
