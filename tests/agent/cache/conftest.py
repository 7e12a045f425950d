"""Fixtures for prefetch tests: a real moto S3 server on loopback that records the requests it
serves, a small real HTTP server with scripted behaviour, and a runner for the CLI."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.s3server import FAKE_AWS, S3Server, running_s3


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    with running_s3() as server:
        yield server


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
