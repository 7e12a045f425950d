"""The publisher's I/O edge to the API server: the Node's uid, the CRD's presence, and GET,
create and merge-patch of this node's NodeResourceTopology.

Every failure comes out as `TopologyApiError`; `CrdMissing` when the API server does not
serve `noderesourcetopologies.topology.node.k8s.io` at all (no CRD installed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from common.kube.errors import describe
from common.node_resource_topology import GROUP, PLURAL, VERSION

__all__ = ["CRD_NAME", "CrdMissing", "TopologyApi", "TopologyApiError"]

CRD_NAME = f"{PLURAL}.{GROUP}"
_MERGE_PATCH = "application/merge-patch+json"
_TIMEOUT = (10.0, 30.0)


class TopologyApiError(Exception):
    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class CrdMissing(TopologyApiError):
    """The API server does not serve the resource: the CRD is not installed."""


class TopologyApi:
    """Reads and writes exactly one object: the NodeResourceTopology named after the node."""

    def __init__(self, api: client.ApiClient) -> None:
        self._objects = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)

    async def _do(self, what: str, call: Any) -> Any:
        try:
            return await call
        except client.ApiException as exc:
            raise TopologyApiError(f"{what}: {describe(exc)}", status=int(exc.status or 0)) from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise TopologyApiError(f"{what}: {type(exc).__name__}: {exc}") from exc

    async def node_uid(self, name: str) -> str:
        node = await self._do(
            f"get node {name}", self._core.read_node(name, _request_timeout=_TIMEOUT)
        )
        return str(node.metadata.uid)

    async def served(self) -> bool:
        """Whether the API server serves the resource (its group/version lists it)."""
        try:
            found = await self._do(
                f"discover {GROUP}/{VERSION}",
                self._objects.get_api_resources(GROUP, VERSION, _request_timeout=_TIMEOUT),
            )
        except TopologyApiError as exc:
            if exc.status == 404:
                return False
            raise
        return any(r.name == PLURAL for r in found.resources or [])

    async def get(self, name: str) -> dict[str, Any] | None:
        """The object, or None when there is none yet."""
        try:
            return await self._do(  # type: ignore[no-any-return]
                f"get {PLURAL}/{name}",
                self._objects.get_cluster_custom_object(
                    GROUP, VERSION, PLURAL, name, _request_timeout=_TIMEOUT
                ),
            )
        except TopologyApiError as exc:
            if exc.status != 404:
                raise
        if not await self.served():
            raise CrdMissing(f"the API server does not serve {CRD_NAME}", status=404)
        return None

    async def create(self, body: Mapping[str, Any]) -> None:
        await self._write(
            f"create {PLURAL}/{body['metadata']['name']}",
            self._objects.create_cluster_custom_object(
                GROUP, VERSION, PLURAL, dict(body), _request_timeout=_TIMEOUT
            ),
        )

    async def patch(self, name: str, body: Mapping[str, Any]) -> None:
        """Merge-patch: lists (zones, attributes) are replaced whole, which is what we mean."""
        await self._write(
            f"patch {PLURAL}/{name}",
            # kubernetes-asyncio accepts _content_type; its hints omit it
            self._objects.patch_cluster_custom_object(  # type: ignore[call-arg]
                GROUP,
                VERSION,
                PLURAL,
                name,
                dict(body),
                _content_type=_MERGE_PATCH,
                _request_timeout=_TIMEOUT,
            ),
        )

    async def _write(self, what: str, call: Any) -> None:
        try:
            await self._do(what, call)
        except TopologyApiError as exc:
            if exc.status == 404 and not await self.served():
                raise CrdMissing(f"the API server does not serve {CRD_NAME}", status=404) from exc
            raise
