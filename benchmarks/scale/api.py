"""The API server over keep-alive HTTPS with the admin client certificate, one connection
per thread (the fleet is written from a few threads at once)."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

from e2e.controlplane.start import ControlPlane

__all__ = ["Api", "watch_lines"]

_MERGE = "application/merge-patch+json"


class Api:
    def __init__(self, cp: ControlPlane) -> None:
        self.context = ssl.create_default_context(cafile=str(cp.pki.ca))
        self.context.load_cert_chain(str(cp.pki.cert("admin")), str(cp.pki.key("admin")))
        url = urlparse(cp.server)
        self.host, self.port = url.hostname, url.port
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self.host, self.port, context=self.context)
            self._local.conn = conn
        return conn

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        ok: tuple[int, ...] = (200, 201),
        content_type: str = "application/json",
    ) -> tuple[int, Any, float]:
        """(status, JSON body, ms); RuntimeError naming the path for another status."""
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data is not None else {}
        for attempt in (1, 2):  # a keep-alive connection the server closed: reconnect once
            conn = self._conn()
            started = time.perf_counter()
            try:
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                payload = response.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
                continue
            ms = (time.perf_counter() - started) * 1000
            if response.status not in ok:
                raise RuntimeError(f"{method} {path}: HTTP {response.status}: {payload[:300]!r}")
            return response.status, json.loads(payload) if payload else None, ms
        raise AssertionError("unreachable")

    def create(self, path: str, obj: dict[str, Any]) -> float:
        return self.call("POST", path, obj)[2]

    def add_node(self, node: dict[str, Any]) -> None:
        """Create a Node as its kubelet registers it, then lift the not-ready taint the API
        server's TaintNodesByCondition admission put on it (the node-lifecycle controller,
        off here, would on seeing it Ready)."""
        self.create("/api/v1/nodes", node)
        taints = {"spec": {"taints": node.get("spec", {}).get("taints") or None}}
        name = node["metadata"]["name"]
        self.call("PATCH", f"/api/v1/nodes/{name}", taints, content_type=_MERGE)

    def get(self, path: str) -> Any:
        return self.call("GET", path)[1]


def watch_lines(api: Api, path: str) -> Iterator[dict[str, Any]]:
    """The events of a watch on `path` (which carries ?watch=1), one JSON object per line,
    on a connection of its own; ends when the server ends the watch."""
    conn = http.client.HTTPSConnection(api.host, api.port, context=api.context)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"watch {path}: HTTP {response.status}: {response.read()[:300]!r}")
        while line := response.readline():
            if line.strip():
                yield json.loads(line)
    finally:
        conn.close()
