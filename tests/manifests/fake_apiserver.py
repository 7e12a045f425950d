"""An in-process server speaking the Kubernetes REST protocol for the two resources the
certificate bootstrap touches: namespaced Secrets (GET, POST, PUT) and
MutatingWebhookConfigurations (GET, PATCH with application/json-patch+json).

Faithful where the client's behaviour depends on it: Status bodies with `reason` and `code`,
409 AlreadyExists on create, 409 Conflict on a stale resourceVersion, 422 on a failed JSON
patch `test` op and on a Secret type change, resourceVersion bumps on every write.
Test hooks: fail the next N requests with 500, hold the first N secret reads until all have
arrived (two replicas race deterministically), and run a callback before a Secret write.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import jsonpatch
from aiohttp import web

from tests.agent.sync.fake_objects import status

__all__ = ["FakeApiServer", "running"]

_SECRET = "/api/v1/namespaces/{ns}/secrets"
_MWC = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}"


class FakeApiServer:
    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.webhook_configs: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.fail_next = 0
        self.fail_status = 500
        self.fail_headers: dict[str, str] = {}
        # the first N secret reads wait for each other (two replicas both see "no secret")
        self.hold_secret_reads = 0
        self._held = 0
        self._release = asyncio.Event()
        self.before_secret_write: Callable[[], None] | None = None
        self._version = 100

    # -- helpers for tests -------------------------------------------------------------
    def bump(self) -> str:
        self._version += 1
        return str(self._version)

    def put_secret(self, obj: dict[str, Any]) -> None:
        obj = copy.deepcopy(obj)
        obj.setdefault("type", "Opaque")
        obj["metadata"]["resourceVersion"] = self.bump()
        self.secrets[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj

    def writes(self) -> list[tuple[str, str]]:
        return [r for r in self.requests if r[0] != "GET"]

    # -- protocol ------------------------------------------------------------------------
    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        if self.fail_next > 0:
            self.fail_next -= 1
            response = status(self.fail_status, "InternalError", "injected failure")
            response.headers.update(self.fail_headers)
            return response
        return await handler(request)

    async def _get_secret(self, request: web.Request) -> web.Response:
        if self._held < self.hold_secret_reads:
            self._held += 1
            if self._held == self.hold_secret_reads:
                self._release.set()
            await self._release.wait()
        key = (request.match_info["ns"], request.match_info["name"])
        if key not in self.secrets:
            return status(404, "NotFound", f'secrets "{key[1]}" not found')
        return web.json_response(self.secrets[key])

    async def _create_secret(self, request: web.Request) -> web.Response:
        body = await request.json()
        ns = request.match_info["ns"]
        name = body["metadata"]["name"]
        if self.before_secret_write is not None:
            self.before_secret_write()
        if (ns, name) in self.secrets:
            return status(409, "AlreadyExists", f'secrets "{name}" already exists')
        body["metadata"]["namespace"] = ns
        body["metadata"]["resourceVersion"] = self.bump()
        self.secrets[(ns, name)] = body
        return web.json_response(body, status=201)

    async def _replace_secret(self, request: web.Request) -> web.Response:
        body = await request.json()
        key = (request.match_info["ns"], request.match_info["name"])
        if self.before_secret_write is not None:
            self.before_secret_write()
        current = self.secrets.get(key)
        if current is None:
            return status(404, "NotFound", f'secrets "{key[1]}" not found')
        sent_version = body["metadata"].get("resourceVersion")
        if sent_version and sent_version != current["metadata"]["resourceVersion"]:
            return status(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on secrets "{key[1]}": the object has been '
                "modified; please apply your changes to the latest version and try again",
            )
        if body.get("type", "Opaque") != current.get("type", "Opaque"):
            return status(422, "Invalid", "Secret type is immutable")
        body["metadata"]["resourceVersion"] = self.bump()
        self.secrets[key] = body
        return web.json_response(body)

    async def _get_mwc(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.webhook_configs:
            return status(404, "NotFound", f'mutatingwebhookconfigurations "{name}" not found')
        return web.json_response(self.webhook_configs[name])

    async def _patch_mwc(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if request.content_type != "application/json-patch+json":
            return status(415, "UnsupportedMediaType", f"unexpected {request.content_type}")
        if name not in self.webhook_configs:
            return status(404, "NotFound", f'mutatingwebhookconfigurations "{name}" not found')
        ops = json.loads(await request.read())
        try:
            patched = jsonpatch.apply_patch(self.webhook_configs[name], ops)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            return status(422, "Invalid", f"the server rejected our request: {exc}")
        patched["metadata"]["resourceVersion"] = self.bump()
        self.webhook_configs[name] = patched
        return web.json_response(patched)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        secret = _SECRET + "/{name}"
        app.router.add_get(secret, self._get_secret)
        app.router.add_put(secret, self._replace_secret)
        app.router.add_post(_SECRET, self._create_secret)
        app.router.add_get(_MWC, self._get_mwc)
        app.router.add_patch(_MWC, self._patch_mwc)
        return app


@asynccontextmanager
async def running(fake: FakeApiServer, kubeconfig: Path) -> AsyncIterator[Path]:
    """Serve `fake` on 127.0.0.1 (port 0) and write a kubeconfig pointing at it."""
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    _write_kubeconfig(kubeconfig, port)
    try:
        yield kubeconfig
    finally:
        await runner.cleanup()


def _write_kubeconfig(path: Path, port: int) -> None:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "webhook", "user": {"token": "test-token"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "webhook"}}],
                "current-context": "fake",
            }
        )
    )
