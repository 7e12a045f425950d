"""Node list + watch on the agent-sync fake API server, as kube-apiserver serves them.

Reuses tests/agent/sync: `FakeApiServer` (HTTPS, bearer token, kubeconfig, planned faults)
and its `PodStore` list/watch protocol (events after a resourceVersion, 410 Gone on
`expire_watches()`), here holding Nodes. Adds what listing thousands of nodes needs: pages
(`limit` / `continue`, one resourceVersion for the whole list), and ConfigMap reads
(what `explain --kubeconfig` reads the served policies from).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.agent.sync.fake_apiserver import TOKEN, FakeApiServer
from tests.agent.sync.fake_pods import PodStore

__all__ = ["NodeApiServer", "NodeStore"]


class NodeStore(PodStore):
    """Nodes by name (their uid is `uid-<name>`)."""

    def put(self, node: dict[str, Any]) -> None:
        """Create or replace a node: an ADDED or MODIFIED event."""
        node = copy.deepcopy(node)
        uid = node["metadata"].setdefault("uid", f"uid-{node['metadata']['name']}")
        kind = "MODIFIED" if uid in self.pods else "ADDED"
        self.pods[uid] = node
        self._record(kind, node)

    def remove(self, name: str) -> None:
        self.delete(f"uid-{name}")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        limit = int(request.query.get("limit") or 0)
        if request.query.get("watch") in ("true", "1", "True") or not limit:
            return await super().handle(request)
        self.lists += 1
        if request.query.get("continue") and request.query.get("resourceVersion"):
            # kube-apiserver's answer: a continue token carries its own snapshot.
            status = {"kind": "Status", "code": 400, "message": "specifying resource version "
                      "is not allowed when using continue"}  # fmt: skip
            return web.json_response(status, status=400)
        start = int(request.query.get("continue") or 0)
        items = sorted(self.pods.values(), key=lambda n: n["metadata"]["name"])
        page = items[start : start + limit]
        metadata: dict[str, Any] = {"resourceVersion": str(self.rv)}
        if start + limit < len(items):
            metadata["continue"] = str(start + limit)
        return web.json_response(
            {"apiVersion": "v1", "kind": "NodeList", "metadata": metadata, "items": page}
        )


@dataclass
class NodeApiServer(FakeApiServer):
    node_store: NodeStore = field(default_factory=NodeStore)
    node_requests: list[str] = field(default_factory=list)  # "list" / "watch", answered or not

    config_maps: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)

    def add_routes(self, app: web.Application) -> None:
        super().add_routes(app)
        app.router.add_get("/api/v1/nodes", self._nodes)
        app.router.add_get("/api/v1/namespaces/{ns}/configmaps/{name}", self._config_map)

    async def _config_map(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        if key not in self.config_maps:
            message = f'configmaps "{key[1]}" not found'
            status = {"kind": "Status", "code": 404, "message": message}
            return web.json_response(status, status=404)
        meta = {"namespace": key[0], "name": key[1], "resourceVersion": "1"}
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
        return web.json_response({**body, "data": self.config_maps[key]})

    async def _nodes(self, request: web.Request) -> web.StreamResponse:
        verb = "watch" if request.query.get("watch") else "list"
        self.node_requests.append(verb)
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        # A fault without a method is for lists; method="WATCH" plans one for a watch.
        wanted = ("WATCH",) if verb == "watch" else (None, "LIST")
        fault = next((f for f in self.faults if f.method in wanted), None)
        if fault is not None:
            self.faults.remove(fault)
        fault = fault or self.outage
        if fault is not None:
            status = {"kind": "Status", "code": fault.status, "message": "planned"}
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
            return web.json_response(status, status=fault.status, headers=headers)
        return await self.node_store.handle(request)
