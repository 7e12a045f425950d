"""The floor: a bare aiohttp TLS server that reads the body and answers a constant allow.

Same TLS setup as the webhook (TLS ≥1.2, the same ECDSA key pair), same event loop; only the
admission logic is missing. Prints `listening: URL` once bound (port 0 allowed).

With `--patch-file`, the bare webhook of bench_e2e.py: it parses each review with the
server's JSON library and answers with that fixed patch (floor.respond), which the API
server needs (the answer's uid must be the request's).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl
from pathlib import Path

from aiohttp import web

from benchmarks.peers.floor import Given, respond
from webhook import jsonio

_ALLOW = (
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",'
    b'"response":{"uid":"00000000-0000-0000-0000-000000000000","allowed":true}}'
)


async def _allow(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=_ALLOW, content_type="application/json")


def _patching(given: Given) -> web.Handler:
    async def mutate(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            answer = respond(body, given)
        except (ValueError, KeyError, TypeError):
            return web.Response(status=400, text="malformed AdmissionReview\n")
        return web.Response(body=answer, content_type="application/json")

    return mutate


async def _healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _serve(cert: str, key: str, host: str, port: int, patch: bytes | None) -> None:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    app = web.Application()
    handler = _allow if patch is None else _patching(Given(jsonio.loads(patch), []))
    app.router.add_post("/mutate", handler)
    app.router.add_get("/healthz", _healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ctx)
    await site.start()
    bound = runner.addresses[0][1]
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else host
    print(f"listening: https://{shown}:{bound}/mutate", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tls-cert", required=True)
    parser.add_argument("--tls-key", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--patch-file", type=Path, help="answer with this JSON patch")
    args = parser.parse_args()
    patch = args.patch_file.read_bytes() if args.patch_file else None
    asyncio.run(_serve(args.tls_cert, args.tls_key, args.host, args.port, patch))


if __name__ == "__main__":
    main()
