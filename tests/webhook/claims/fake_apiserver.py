"""An in-process server speaking the Kubernetes REST protocol for what the template reconciler
calls: Namespaces (list, watch) and resource.k8s.io/v1 ResourceClaimTemplates (list and watch
across namespaces with a label selector, create, delete with a resourceVersion precondition).

Faithful where the client's behaviour depends on it: Status bodies with `reason` and `code`,
409 AlreadyExists on create, 409 Conflict on a failed precondition, 404 on a missing object
or namespace, 403 on create in a terminating namespace, watch streams as newline-delimited
JSON events (ADDED/MODIFIED/DELETED), resourceVersion bumps on every write, and a watch from
a resourceVersion first gets the events after it (what changed between a list and its watch).
Test hooks: fail the next N requests with 500, end every open watch (a dropped connection).
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from tests.agent.sync.fake_objects import status

__all__ = ["FakeApiServer", "running"]

_TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates"


def _matches(obj: dict[str, Any], selector: str | None) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class FakeApiServer:
    def __init__(self) -> None:
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.templates: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.fail_next = 0
        self._version = 100
        self._watchers: list[tuple[str, str | None, asyncio.Queue[Any]]] = []
        self._history: list[tuple[int, str, dict[str, Any]]] = []  # (version, kind, event)

    # -- helpers for tests -------------------------------------------------------------
    def bump(self) -> str:
        self._version += 1
        return str(self._version)

    def add_namespace(self, name: str, *, phase: str = "Active") -> None:
        obj = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "resourceVersion": self.bump()},
            "status": {"phase": phase},
        }
        self.namespaces[name] = obj
        self._notify("namespaces", "ADDED", obj)

    def delete_namespace(self, name: str) -> None:
        obj = self.namespaces.pop(name)
        for key in [k for k in self.templates if k[0] == name]:
            self._notify("templates", "DELETED", self.templates.pop(key))
        self._notify("namespaces", "DELETED", obj)

    def put_template(self, obj: dict[str, Any]) -> None:
        """A template written by someone else (another tool, a person)."""
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = self.bump()
        self.templates[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj
        self._notify("templates", "ADDED", obj)

    def names(self, namespace: str) -> set[str]:
        return {name for ns, name in self.templates if ns == namespace}

    def writes(self) -> list[tuple[str, str]]:
        return [r for r in self.requests if r[0] != "GET"]

    def watching(self, kind: str) -> bool:
        """A watch on `kind` is open: events from now on reach it (earlier ones do not)."""
        return any(watched == kind for watched, _, _ in self._watchers)

    def drop_watches(self) -> None:
        for _, _, queue in self._watchers:
            queue.put_nowait(None)

    def _notify(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        # A delete is a write too: it gets a version of its own, as on the API server.
        version = int(self.bump()) if event == "DELETED" else self._version
        self._history.append((version, kind, {"type": event, "object": copy.deepcopy(obj)}))
        for watched, selector, queue in self._watchers:
            if watched == kind and _matches(obj, selector):
                queue.put_nowait({"type": event, "object": copy.deepcopy(obj)})

    # -- protocol ------------------------------------------------------------------------
    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        if self.fail_next > 0:
            self.fail_next -= 1
            return status(500, "InternalError", "injected failure")
        return await handler(request)

    async def _list_namespaces(self, request: web.Request) -> web.StreamResponse:
        return await self._list(request, "namespaces")

    async def _list_templates(self, request: web.Request) -> web.StreamResponse:
        return await self._list(request, "templates")

    async def _list(self, request: web.Request, kind: str) -> web.StreamResponse:
        selector = request.query.get("labelSelector")
        objects = self.namespaces.values() if kind == "namespaces" else self.templates.values()
        items = [copy.deepcopy(o) for o in objects if _matches(o, selector)]
        if request.query.get("watch", "").lower() in ("true", "1"):
            return await self._watch(request, kind, selector, items)
        list_kind = "NamespaceList" if kind == "namespaces" else "ResourceClaimTemplateList"
        return web.json_response(
            {"kind": list_kind, "metadata": {"resourceVersion": str(self._version)}, "items": items}
        )

    async def _watch(
        self, request: web.Request, kind: str, selector: str | None, items: list[dict[str, Any]]
    ) -> web.StreamResponse:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        # Without a resourceVersion a watch starts with an ADDED event per existing object;
        # from one, with every event after it.
        since = request.query.get("resourceVersion")
        if not since:
            for item in items:
                queue.put_nowait({"type": "ADDED", "object": item})
        else:
            for version, watched, event in self._history:
                if version > int(since) and watched == kind and _matches(event["object"], selector):
                    queue.put_nowait(copy.deepcopy(event))
        entry = (kind, selector, queue)
        self._watchers.append(entry)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        try:
            while (event := await queue.get()) is not None:
                await response.write(json.dumps(event).encode() + b"\n")
        finally:
            self._watchers.remove(entry)
        return response

    async def _create(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        body = await request.json()
        name = body["metadata"]["name"]
        namespace = self.namespaces.get(ns)
        if namespace is None:
            return status(404, "NotFound", f'namespaces "{ns}" not found')
        if namespace["status"]["phase"] == "Terminating":
            return status(403, "Forbidden", f"namespace {ns} is being terminated")
        if (ns, name) in self.templates:
            return status(409, "AlreadyExists", f'resourceclaimtemplates "{name}" already exists')
        body["metadata"]["namespace"] = ns
        body["metadata"]["resourceVersion"] = self.bump()
        self.templates[(ns, name)] = body
        self._notify("templates", "ADDED", body)
        return web.json_response(body, status=201)

    async def _delete(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        current = self.templates.get(key)
        if current is None:
            return status(404, "NotFound", f'resourceclaimtemplates "{key[1]}" not found')
        options = await request.json() if request.can_read_body else {}
        wanted = (options.get("preconditions") or {}).get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            return status(409, "Conflict", "Precondition failed: resourceVersion mismatch")
        del self.templates[key]
        self._notify("templates", "DELETED", current)
        return web.json_response(current)  # as the API server answers a delete

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/api/v1/namespaces", self._list_namespaces)
        app.router.add_get("/apis/resource.k8s.io/v1/resourceclaimtemplates", self._list_templates)
        app.router.add_post(_TEMPLATES, self._create)
        app.router.add_delete(_TEMPLATES + "/{name}", self._delete)
        return app


@asynccontextmanager
async def running(server: FakeApiServer) -> AsyncIterator[str]:
    """Serve on 127.0.0.1, an ephemeral port; yields the base URL."""
    runner = web.AppRunner(server.app(), shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.drop_watches()
        await runner.cleanup()
