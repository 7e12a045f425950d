"""Fixtures for prefetch tests: a real moto S3 server on loopback that records the requests it
serves, a small real HTTP server with scripted behaviour, and a runner for the CLI."""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
# werkzeug's request log line: `"GET /bucket/key?query HTTP/1.1" 206 -`, maybe with ANSI colours.
_REQUEST = re.compile(r'"(?:\x1b\[[\d;]*m)*([A-Z]+) (\S+) HTTP/[\d.]+(?:\x1b\[[\d;]*m)*" (\d+)')


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str  # without the query string
    status: int


@dataclass(slots=True)
class S3Server:
    endpoint: str
    client: Any  # boto3 S3 client
    requests: list[Request] = field(default_factory=list)

    def gets(self, bucket: str, prefix: str = "", *, since: int = 0) -> list[Request]:
        """Object reads (not listings) under bucket/prefix, from request number `since` on."""
        base = f"/{bucket}/{prefix}"
        return [r for r in self.requests[since:] if r.method == "GET" and r.path.startswith(base)]

    def new_bucket(self) -> str:
        name = f"t-{uuid.uuid4().hex[:12]}"
        self.client.create_bucket(Bucket=name)
        return name

    def put_tree(self, bucket: str, prefix: str, files: Mapping[str, bytes]) -> None:
        for rel, data in files.items():
            self.client.put_object(Bucket=bucket, Key=f"{prefix}{rel}", Body=data)


class _RequestLog(logging.Handler):
    def __init__(self, sink: list[Request]) -> None:
        super().__init__(logging.INFO)
        self._sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        m = _REQUEST.search(record.getMessage())
        if m:
            self._sink.append(Request(m[1], m[2].split("?", 1)[0], int(m[3])))


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=FAKE_AWS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_AWS["AWS_SECRET_ACCESS_KEY"],
        region_name=FAKE_AWS["AWS_DEFAULT_REGION"],
    )
    state = S3Server(endpoint=endpoint, client=client)
    # werkzeug logs each served request; that log is our server-side request counter.
    wlog = logging.getLogger("werkzeug")
    handler = _RequestLog(state.requests)
    old_level, old_propagate = wlog.level, wlog.propagate
    wlog.setLevel(logging.INFO)
    wlog.propagate = False
    wlog.addHandler(handler)
    try:
        yield state
    finally:
        wlog.removeHandler(handler)
        wlog.setLevel(old_level)
        wlog.propagate = old_propagate
        server.stop()


@pytest.fixture
def prefetch_env(repo_root: Path) -> dict[str, str]:
    """Environment for CLI runs; S3 tests add AWS_ENDPOINT_URL (see test_prefetch_s3.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(FAKE_AWS, PYTHONPATH=str(repo_root), AWS_MAX_ATTEMPTS="2")
    return env


RunPrefetch = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_prefetch(python: str, repo_root: Path, prefetch_env: dict[str, str]) -> RunPrefetch:
    def run(
        *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [python, "-m", "agent", "prefetch", *args],
            cwd=repo_root,
            env={**prefetch_env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run


@dataclass(slots=True)
class Route:
    body: bytes = b""
    status: int = 200
    stall_after: int | None = None  # bytes sent before waiting for `release`
    release: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer

    def _route(self) -> Route | None:
        route = self.server.routes.get(self.path)
        if route is None or route.status != 200:
            self.send_error(route.status if route else 404)
            return None
        self.send_response(200)
        self.send_header("Content-Length", str(len(route.body)))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        return route

    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        route = self._route()
        if route is None:
            return
        cut = len(route.body) if route.stall_after is None else route.stall_after
        self.wfile.write(route.body[:cut])
        self.wfile.flush()
        route.started.set()
        if cut < len(route.body):
            route.release.wait(timeout=30)
            self.wfile.write(route.body[cut:])

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        return


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    routes: dict[str, Route]


@dataclass(frozen=True, slots=True)
class HTTPSource:
    base: str
    routes: dict[str, Route]


@pytest.fixture
def http_source() -> Iterator[HTTPSource]:
    server = _HTTPServer(("127.0.0.1", 0), _Handler)
    server.routes = {}
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield HTTPSource(base=f"http://{host}:{port}", routes=server.routes)
    finally:
        for route in server.routes.values():
            route.release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def refusing_endpoint() -> Iterator[str]:
    """A bound socket that never listens: connections to it are refused, and the port stays
    ours for the whole test."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()
