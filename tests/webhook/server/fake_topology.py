"""NodeResourceTopology list + watch and Lease reads on the node fake API server, as
kube-apiserver serves them (a CRD that is not installed answers 404 on its path)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.agent.sync.fake_apiserver import TOKEN, Fault
from tests.webhook.server.fake_nodes import NodeApiServer, NodeStore

__all__ = ["TopologyApiServer"]

NRT_PATH = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}"


def _status(code: int, message: str) -> web.Response:
    return web.json_response({"kind": "Status", "code": code, "message": message}, status=code)


@dataclass
class TopologyApiServer(NodeApiServer):
    nrt_store: NodeStore = field(default_factory=NodeStore)
    crd_installed: bool = True
    nrt_requests: list[str] = field(default_factory=list)
    leases: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    lease_reads: int = 0
    nrt_outage: Fault | None = None  # answered to every NodeResourceTopology request meanwhile

    def add_routes(self, app: web.Application) -> None:
        super().add_routes(app)
        app.router.add_get(NRT_PATH, self._nrts)
        app.router.add_get(LEASE_PATH, self._lease)

    async def _nrts(self, request: web.Request) -> web.StreamResponse:
        self.nrt_requests.append("watch" if request.query.get("watch") else "list")
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return _status(401, "Unauthorized")
        if not self.crd_installed:
            return _status(404, "the server could not find the requested resource")
        if self.nrt_outage is not None:
            headers = {"Retry-After": r} if (r := self.nrt_outage.retry_after) else None
            return web.json_response(
                {"kind": "Status", "code": self.nrt_outage.status, "message": "planned"},
                status=self.nrt_outage.status,
                headers=headers,
            )
        return await self.nrt_store.handle(request)

    async def _lease(self, request: web.Request) -> web.Response:
        self.lease_reads += 1
        key = (request.match_info["ns"], request.match_info["name"])
        if key not in self.leases:
            return _status(404, f'leases.coordination.k8s.io "{key[1]}" not found')
        return web.json_response(self.leases[key])
