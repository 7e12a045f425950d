"""An in-process API server that speaks the Kubernetes REST protocol for Nodes.

Faithful enough for the real kubernetes-asyncio client: HTTPS with a test CA, bearer-token
auth, `GET /api/v1/nodes/{name}`, `PATCH` with merge-patch, strategic-merge-patch (for the
label and annotation maps both null-delete) and JSON-patch, `metadata.resourceVersion`
bumped whenever a write changes the object (a no-op write leaves it, as kube-apiserver does),
an optimistic-concurrency 409 when a patch carries a stale resourceVersion, 404/409/415/422
`Status` objects, and label validation. Tests plan faults (500, 429 + Retry-After, 409,
dropped connections) in a queue, or an outage that lasts until `recover()` (`fail_all`), and
read a request log with arrival times. `stop_listening()` /
`start_listening()` make the port refuse connections and come back on the same port.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import trustme
import yaml
from aiohttp import web

from tests.agent.sync.fake_objects import REASONS, invalid_metadata, merge, status, strategic
from tests.agent.sync.fake_pods import PodStore

__all__ = ["FakeApiServer", "Fault", "Request"]

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
TOKEN = "fake-token-for-tests"


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    content_type: str
    status: int  # 0: connection dropped without an answer
    body: Any = None
    at: float = field(default_factory=time.monotonic)  # arrival, time.monotonic()


@dataclass(frozen=True, slots=True)
class Fault:
    """A planned answer for the next request (of `method`, when given): a status, with an
    optional Retry-After, or a dropped connection."""

    status: int = 500
    retry_after: str | None = None
    drop: bool = False
    method: str | None = None


@dataclass
class FakeApiServer:
    tmp_dir: Path
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    faults: deque[Fault] = field(default_factory=deque)
    outage: Fault | None = None  # answers every request until recover()
    pods: PodStore = field(default_factory=PodStore)  # list + watch (fake_pods.py)
    port: int = 0
    _rv: int = 100
    _runner: web.AppRunner | None = None
    _site: web.TCPSite | None = None
    _ssl: ssl.SSLContext | None = None
    _ca: trustme.CA | None = None
    _transports: set[asyncio.BaseTransport] = field(default_factory=set)

    # --- lifecycle -------------------------------------------------------------------------
    async def __aenter__(self) -> FakeApiServer:
        self._ca = trustme.CA()
        self._ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ca.issue_cert("127.0.0.1", "localhost").configure_cert(self._ssl)
        app = web.Application()
        self.add_routes(app)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        await self.start_listening()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def add_routes(self, app: web.Application) -> None:
        """What is served; a fake for more resources extends this (tests/webhook/server)."""
        app.router.add_route("*", "/api/v1/nodes/{name}", self._node)
        app.router.add_get("/api/v1/pods", self._pods)

    async def start_listening(self) -> None:
        """Bind (port 0 the first time, then the same port again) and accept connections."""
        assert self._runner is not None and self._ssl is not None  # test helper, not a guard
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=self._ssl)
        await self._site.start()
        self.port = self._runner.addresses[0][1]

    async def stop_listening(self) -> None:
        """Close the listening socket: new connections are refused until start_listening()."""
        if self._site is not None:
            await self._site.stop()
            self._site = None
        for transport in self._transports:  # idle keep-alive connections too
            transport.abort()
        self._transports.clear()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: Path | None = None) -> Path:
        assert self._ca is not None
        path = path or self.tmp_dir / "kubeconfig"
        ca = base64.b64encode(self._ca.cert_pem.bytes()).decode()
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "fake", "cluster": {"server": self.url, "certificate-authority-data": ca}}
            ],
            "users": [{"name": "agent", "user": {"token": TOKEN}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "agent"}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(doc))
        return path

    # --- state -----------------------------------------------------------------------------
    def add_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> None:
        self._rv += 1
        self.nodes[name] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "resourceVersion": str(self._rv),
                "creationTimestamp": "2026-11-29T10:00:00Z",
                "labels": dict(labels or {}),
                "annotations": dict(annotations or {}),
            },
            "spec": {},
            "status": {"conditions": []},
        }

    def labels(self, name: str) -> dict[str, str]:
        return dict(self.nodes[name]["metadata"].get("labels") or {})

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.nodes[name]["metadata"].get("annotations") or {})

    def edit(self, name: str, *, labels: dict[str, str | None]) -> None:
        """A hand edit (kubectl label): change or (None) remove labels, bump resourceVersion."""
        self._rv += 1
        md = self.nodes[name]["metadata"]
        md["labels"] = merge(md.get("labels") or {}, labels)
        md["resourceVersion"] = str(self._rv)

    def fail_all(self, status: int = 500, *, retry_after: str | None = None) -> None:
        """Answer every request with `status` until `recover()` (a time-bounded outage)."""
        self.outage = Fault(status, retry_after=retry_after)

    def recover(self) -> float:
        """End the outage; returns the moment (time.monotonic()) the API answers again."""
        self.outage = None
        return time.monotonic()

    def count(self, method: str, *, answered: int | None = None) -> int:
        return sum(
            1
            for r in self.requests
            if r.method == method and (answered is None or r.status == answered)
        )

    # --- protocol --------------------------------------------------------------------------
    async def _pods(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return status(401, "Unauthorized", "Unauthorized")
        if self.outage is not None:  # planned faults stay for the Node requests they name
            return status(self.outage.status, "InternalError", "planned")
        return await self.pods.handle(request)

    async def _node(self, request: web.Request) -> web.StreamResponse:
        content_type = request.headers.get("Content-Type", "")
        body_text = await request.text() if request.can_read_body else ""
        if request.transport is not None:
            self._transports.add(request.transport)
        response = await self._answer(request, content_type, body_text)
        if response is None:  # dropped
            self.requests.append(Request(request.method, request.path, content_type, 0))
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)  # never reaches the client: the socket is gone
        body = json.loads(body_text) if body_text.strip() else None
        self.requests.append(
            Request(request.method, request.path, content_type, response.status, body)
        )
        return response

    async def _answer(
        self, request: web.Request, content_type: str, body_text: str
    ) -> web.Response | None:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return status(401, "Unauthorized", "Unauthorized")
        fault = next((f for f in self.faults if f.method in (None, request.method)), None)
        if fault is not None:
            self.faults.remove(fault)
        fault = fault or self.outage
        if fault is not None:
            if fault.drop:
                return None
            resp = status(fault.status, REASONS.get(fault.status, "InternalError"), "planned")
            if fault.retry_after is not None:
                resp.headers["Retry-After"] = fault.retry_after
            return resp
        name = request.match_info["name"]
        if request.method == "GET":
            if name not in self.nodes:
                return status(404, "NotFound", f'nodes "{name}" not found', name=name, kind="nodes")
            return web.json_response(self.nodes[name])
        if request.method == "PATCH":
            return self._patch(name, content_type.split(";")[0].strip(), body_text)
        return status(405, "MethodNotAllowed", f"{request.method} is not supported here")

    def _patch(self, name: str, content_type: str, body_text: str) -> web.Response:
        if content_type not in (MERGE, STRATEGIC, JSON_PATCH):
            return status(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                f"{JSON_PATCH}, {MERGE}, {STRATEGIC}",
            )
        if name not in self.nodes:
            return status(404, "NotFound", f'nodes "{name}" not found', name=name, kind="nodes")
        current = self.nodes[name]
        try:
            patch = json.loads(body_text)
            if content_type == JSON_PATCH:
                updated = jsonpatch.apply_patch(current, patch)
            elif content_type == STRATEGIC:
                updated = strategic(current, patch)
            else:
                updated = merge(current, patch)
        except (ValueError, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            return status(400, "BadRequest", f"error decoding patch: {exc}")
        sent_rv = (
            (patch.get("metadata") or {}).get("resourceVersion")
            if isinstance(patch, dict)
            else None
        )
        if sent_rv is not None and sent_rv != current["metadata"]["resourceVersion"]:
            return status(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
                name=name,
                kind="nodes",
            )
        if updated["metadata"].get("name") != name:
            return status(400, "BadRequest", "metadata.name is immutable")
        problem = invalid_metadata(updated)
        if problem:
            return status(
                422, "Invalid", f'Node "{name}" is invalid: {problem}', name=name, kind="Node"
            )
        updated["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        if updated != current:
            self._rv += 1
            updated["metadata"]["resourceVersion"] = str(self._rv)
            self.nodes[name] = updated
        return web.json_response(self.nodes[name])
