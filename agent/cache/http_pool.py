"""Keep-alive HTTP/1.1 connections for the ranged fetcher's worker threads, one per host and
thread, through the proxy the environment names (HTTPS_PROXY, HTTP_PROXY, NO_PROXY: what
obstore's own client honours for the listing and the small objects, so every request of a
prefetch takes the same way out). HTTPS goes through a proxy as a CONNECT tunnel.
"""

from __future__ import annotations

import base64
import http.client
import threading
import urllib.request
from urllib.parse import SplitResult, unquote, urlsplit

__all__ = ["Connections"]


class Connections:
    """Per-thread connections; `get` hands back the thread's open one unless `fresh`."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._local = threading.local()

    def get(
        self, url: str, *, fresh: bool
    ) -> tuple[http.client.HTTPConnection, str, dict[str, str]]:
        """(connection, request target, extra headers) for a GET of `url`."""
        parts = urlsplit(url)
        proxy = _proxy_for(parts.scheme, parts.hostname or "")
        via = urlsplit(proxy) if proxy else None
        auth = _proxy_auth(via) if via else {}
        plain_proxy = via is not None and parts.scheme != "https"  # absolute-form requests
        target = url if plain_proxy else parts.path + (f"?{parts.query}" if parts.query else "")
        key = (parts.scheme, parts.netloc, proxy)
        conns: dict[tuple[str, str, str], http.client.HTTPConnection]
        conns = self._local.__dict__.setdefault("conns", {})
        conn = conns.get(key)
        if fresh and conn is not None:
            conn.close()
            conn = None
        if conn is None:
            conn = conns[key] = self._connect(parts, via, auth)
        return conn, target, auth if plain_proxy else {}

    def _connect(
        self, parts: SplitResult, via: SplitResult | None, auth: dict[str, str]
    ) -> http.client.HTTPConnection:
        https = parts.scheme == "https"
        if via is None:
            kind = http.client.HTTPSConnection if https else http.client.HTTPConnection
            return kind(parts.netloc, timeout=self._timeout_s)
        at = via.netloc.rpartition("@")[2]  # the proxy's host:port, without credentials
        if not https:
            return http.client.HTTPConnection(at, timeout=self._timeout_s)
        conn = http.client.HTTPSConnection(at, timeout=self._timeout_s)
        conn.set_tunnel(parts.netloc, headers=auth)  # TLS to the origin, inside CONNECT
        return conn


def _proxy_for(scheme: str, host: str) -> str:
    if not host or urllib.request.proxy_bypass(host):
        return ""
    proxy = urllib.request.getproxies().get(scheme, "")
    return proxy if not proxy or "://" in proxy else f"http://{proxy}"


def _proxy_auth(via: SplitResult) -> dict[str, str]:
    if via.username is None:
        return {}
    pair = f"{unquote(via.username)}:{unquote(via.password or '')}"
    return {"Proxy-Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}
