"""A real S3-compatible server (moto) on 127.0.0.1 that records the requests it serves: for the
prefetch tests and the end-to-end dataset scenarios alike."""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from e2e.addons.objectstore import client

__all__ = ["FAKE_AWS", "Request", "S3Server", "running_s3"]

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


@contextlib.contextmanager
def running_s3() -> Iterator[S3Server]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    s3 = client(
        endpoint,
        key=FAKE_AWS["AWS_ACCESS_KEY_ID"],
        secret=FAKE_AWS["AWS_SECRET_ACCESS_KEY"],
        region=FAKE_AWS["AWS_DEFAULT_REGION"],
    )
    state = S3Server(endpoint=endpoint, client=s3)
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
