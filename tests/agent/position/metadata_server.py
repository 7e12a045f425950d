"""A local instance-metadata server on 127.0.0.1: real HTTP, answers set per path by the test."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["MetadataServer", "metadata_server"]


@dataclass
class MetadataServer:
    url: str
    answers: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    hold: threading.Event | None = None  # set: answer only once the test releases it

    def answer(self, path: str, body: bytes | str, status: int = 200) -> str:
        self.answers[path] = (status, body.encode() if isinstance(body, str) else body)
        return self.url + path


@contextmanager
def metadata_server() -> Iterator[MetadataServer]:
    state: MetadataServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append((self.path, dict(self.headers.items())))
            if state.hold is not None:
                state.hold.wait(30)
            status, body = state.answers.get(self.path, (404, b"not found"))
            try:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the client gave up first (the slow case)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state = MetadataServer(url=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        if state.hold is not None:
            state.hold.set()
        server.shutdown()
        server.server_close()
        thread.join(5)
