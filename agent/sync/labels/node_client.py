"""The agent's only I/O edge to the API server: read and merge-patch one Node.

Built on kubernetes-asyncio. Every failure comes out as one of the typed `NodeApiError`
subclasses below so the sync loop can decide between "wait for the node", "back off" and
"back off longer"; every request is reported to `on_call` as a frozen `ApiCall` record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp
from kubernetes_asyncio import client

from agent.sync.labels.node_diff import NodeMeta
from common.kube.errors import retry_after
from common.kube_config import load_configuration

__all__ = [
    "MERGE_PATCH",
    "ApiCall",
    "ApiRejected",
    "ApiServerError",
    "ApiThrottled",
    "ApiUnreachable",
    "NodeApiError",
    "NodeClient",
    "NodeConflict",
    "NodeNotFound",
    "NodeState",
    "connect",
]

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
# (connect, read) seconds: a hung API server must turn into a retry, not a stuck agent.
_TIMEOUT = (10.0, 30.0)

Outcome = Literal[
    "ok", "not_found", "conflict", "throttled", "server_error", "rejected", "unreachable"
]


class NodeApiError(Exception):
    """A request about the node failed; `status` is the HTTP status (0 when none came back)."""

    outcome: Outcome = "rejected"

    def __init__(self, message: str, *, status: int = 0, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class NodeNotFound(NodeApiError):
    outcome = "not_found"


class NodeConflict(NodeApiError):
    outcome = "conflict"


class ApiThrottled(NodeApiError):
    """429 Too Many Requests; `retry_after` holds the server's wish when it gave one."""

    outcome = "throttled"


class ApiServerError(NodeApiError):
    outcome = "server_error"


class ApiRejected(NodeApiError):
    """Any other 4xx: not transient by nature, still retried slowly by the loop."""

    outcome = "rejected"


class ApiUnreachable(NodeApiError):
    """No HTTP answer: connection refused or reset, DNS, TLS or timeout."""

    outcome = "unreachable"


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One request sent to the API server, for metrics."""

    verb: Literal["get", "patch"]
    outcome: Outcome
    status: int
    seconds: float


@dataclass(frozen=True, slots=True)
class NodeState:
    meta: NodeMeta
    resource_version: str


def _typed(exc: client.ApiException, what: str) -> NodeApiError:
    status = int(exc.status or 0)
    message = f"{what}: HTTP {status} {exc.reason or ''}".strip()
    if status == 404:
        return NodeNotFound(message, status=status)
    if status == 409:
        return NodeConflict(message, status=status)
    if status == 429:
        return ApiThrottled(message, status=status, retry_after=retry_after(exc.headers))
    if status >= 500:
        return ApiServerError(message, status=status, retry_after=retry_after(exc.headers))
    return ApiRejected(message, status=status)


def _state(node: client.V1Node) -> NodeState:
    md = node.metadata
    return NodeState(
        meta=NodeMeta(labels=dict(md.labels or {}), annotations=dict(md.annotations or {})),
        resource_version=str(md.resource_version or ""),
    )


class NodeClient:
    """GET and PATCH one kind of object: Node. Use through `connect()`."""

    __slots__ = ("_api", "_core", "_on_call")

    def __init__(self, api: client.ApiClient, *, on_call: Callable[[ApiCall], None]) -> None:
        self._api = api
        self._core = client.CoreV1Api(api)
        self._on_call = on_call

    async def _call(self, verb: Literal["get", "patch"], name: str, body: Any = None) -> NodeState:
        started = time.monotonic()
        outcome: Outcome = "ok"
        status = 200
        try:
            if verb == "get":
                node = await self._core.read_node(name, _request_timeout=_TIMEOUT)
            else:
                # Pass the content type: the client would otherwise guess JSON Patch from a list
                # and strategic merge from a dict; merge-patch null-deletes exactly our keys.
                # (kubernetes-asyncio accepts _content_type; its hints omit it.)
                node = await self._core.patch_node(  # type: ignore[call-arg]
                    name, body, _content_type=MERGE_PATCH, _request_timeout=_TIMEOUT
                )
            return _state(node)
        except client.ApiException as exc:
            err = _typed(exc, f"{verb} node {name}")
            outcome, status = err.outcome, err.status
            raise err from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            outcome, status = "unreachable", 0
            raise ApiUnreachable(f"{verb} node {name}: {type(exc).__name__}: {exc}") from exc
        finally:
            self._on_call(ApiCall(verb, outcome, status, time.monotonic() - started))

    @property
    def api(self) -> client.ApiClient:
        """The connection, for the pod watch (same credentials and pool)."""
        return self._api

    async def get(self, name: str) -> NodeState:
        return await self._call("get", name)

    async def patch(self, name: str, body: Mapping[str, Any]) -> NodeState:
        """Merge-patch the node (`application/merge-patch+json`): null values delete keys."""
        return await self._call("patch", name, dict(body))

    async def close(self) -> None:
        await self._api.close()


class _Connection(AbstractAsyncContextManager[NodeClient]):
    def __init__(self, kubeconfig: Path | None, on_call: Callable[[ApiCall], None]) -> None:
        self._kubeconfig = kubeconfig
        self._on_call = on_call
        self._client: NodeClient | None = None

    async def __aenter__(self) -> NodeClient:
        cfg = await load_configuration(self._kubeconfig)
        self._client = NodeClient(client.ApiClient(configuration=cfg), on_call=self._on_call)
        return self._client

    async def __aexit__(self, *exc_info: object) -> None:
        if self._client is not None:
            await self._client.close()


def connect(
    *, kubeconfig: Path | None = None, on_call: Callable[[ApiCall], None] = lambda _: None
) -> AbstractAsyncContextManager[NodeClient]:
    """`async with connect(kubeconfig=...) as nodes:` — loads config, closes the pool on exit.

    An explicit kubeconfig wins; otherwise in-cluster when KUBERNETES_SERVICE_HOST is set,
    else $KUBECONFIG or ~/.kube/config. Raises ConfigError when none is usable.
    """
    return _Connection(kubeconfig, on_call)
