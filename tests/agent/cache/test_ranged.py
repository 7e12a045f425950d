"""The ranged fetcher (large objects, parallel byte ranges, O_DIRECT) against a real HTTP/1.1
server that honours Range and misbehaves on script: a body cut short resumes from the last
byte written, 503 with Retry-After is waited out as given, 404/403 end at once with the
right error, a server that ignores Range is refused, and a stop request ends every worker."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agent.cache import ranged
from agent.cache.source_errors import Cancelled, IntegrityError
from common.backoff import BackoffPolicy

KIB = 1024
_RANGE = re.compile(r"bytes=(\d+)-(\d+)")


@dataclass(slots=True)
class Fault:
    """What the server does to the request number `at` (counted from 0)."""

    at: int
    status: int = 0  # answer this status instead (with Retry-After when retry_after is set)
    cut_after: int | None = None  # send this many body bytes, then drop the connection
    retry_after: str | None = None
    ignore_range: bool = False


@dataclass(slots=True)
class Blob:
    data: bytes
    faults: list[Fault] = field(default_factory=list)
    ranges: list[tuple[int, int]] = field(default_factory=list)  # as asked, in order
    etag: str = '"v1"'  # If-Match is checked against it
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as S3 servers do
    server: _Server

    def do_GET(self) -> None:
        blob = self.server.blob
        m = _RANGE.fullmatch(self.headers.get("Range", ""))
        start, end = (int(m[1]), int(m[2])) if m else (0, len(blob.data) - 1)
        with blob.lock:
            n = len(blob.ranges)
            blob.ranges.append((start, end))
        fault = next((f for f in blob.faults if f.at == n), None)
        if self.headers.get("If-Match", blob.etag) != blob.etag:
            fault = Fault(at=n, status=412)
        if fault and fault.status:
            body = b"<Error><Code>Scripted</Code></Error>"
            self.send_response(fault.status)
            if fault.retry_after:
                self.send_header("Retry-After", fault.retry_after)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if fault and fault.ignore_range:
            start, end = 0, len(blob.data) - 1
            self.send_response(200)
        else:
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(blob.data)}")
        body = blob.data[start : end + 1]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if fault and fault.cut_after is not None:
            self.wfile.write(body[: fault.cut_after])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    blob: Blob

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client that hangs up mid-body (refused 200s, stops) is part of the script


@pytest.fixture
def server() -> Iterator[tuple[str, _Server]]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.blob = Blob(b"")
    host, port = srv.server_address[:2]
    with _serving(srv):
        yield f"http://{host}:{port}/bucket/big.bin?X-Amz-Signature=abc", srv


@contextlib.contextmanager
def _serving(srv: ThreadingHTTPServer) -> Iterator[None]:
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture(autouse=True)
def small_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """64 KiB parts of 16 KiB buffers, 3 workers: many ranges and buffers, little data."""
    monkeypatch.setattr(ranged, "PART", 64 * KIB)
    monkeypatch.setattr(ranged, "BUF", 16 * KIB)
    monkeypatch.setattr(ranged, "MAX_PARTS", 3)


FAST = BackoffPolicy(initial=0.01, cap=0.02, floor=0.01)


def _fetch(
    url: str,
    path: Path,
    size: int,
    *,
    attempts: int = 3,
    progress: Callable[[int], None] | None,
    etag: str | None = '"v1"',
) -> None:
    fetcher = ranged.RangedFetcher(attempts=attempts, backoff=FAST)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    what = "s3://bucket/big.bin"
    try:
        asyncio.run(
            fetcher.fetch(lambda: url, what, fd, str(path), size, progress or _no, etag=etag)
        )
    finally:
        os.close(fd)


def _no(n: int) -> None:
    return None


@pytest.mark.parametrize("direct", [True, False], ids=["O_DIRECT", "page-cache"])
def test_ranges_land_byte_identical_with_progress_counted_once(
    server: tuple[str, _Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct: bool
) -> None:
    url, srv = server
    srv.blob = Blob(os.urandom(200 * KIB + 123))  # a tail that is not block-aligned
    if not direct:
        monkeypatch.setattr(ranged, "_open_direct", lambda path: None)
    seen: list[int] = []
    target = tmp_path / "big.bin"

    _fetch(url, target, len(srv.blob.data), progress=seen.append)

    assert target.read_bytes() == srv.blob.data  # the padded direct tail was cut back
    assert sum(seen) == len(srv.blob.data)
    starts = sorted(start for start, _ in srv.blob.ranges)
    assert starts == [0, 64 * KIB, 128 * KIB, 192 * KIB]


def test_a_body_cut_short_resumes_from_the_last_byte_written(
    server: tuple[str, _Server], tmp_path: Path
) -> None:
    url, srv = server
    srv.blob = Blob(os.urandom(64 * KIB), faults=[Fault(at=0, cut_after=40 * KIB)])
    seen: list[int] = []
    target = tmp_path / "big.bin"

    _fetch(url, target, 64 * KIB, progress=seen.append)

    assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(srv.blob.data).digest()
    # 40 KiB arrived: two full 16 KiB buffers were written; the rest is asked for again.
    assert srv.blob.ranges == [(0, 64 * KIB - 1), (32 * KIB, 64 * KIB - 1)]
    assert sum(seen) == 64 * KIB


def test_retry_after_is_waited_as_the_server_gives_it(
    server: tuple[str, _Server], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url, srv = server
    srv.blob = Blob(os.urandom(10 * KIB), faults=[Fault(at=0, status=503, retry_after="0.3")])
    caplog.set_level(logging.INFO, logger=ranged.__name__)

    _fetch(url, tmp_path / "big.bin", 10 * KIB, progress=None)

    assert (tmp_path / "big.bin").read_bytes() == srv.blob.data
    assert "HTTP 503" in caplog.text and "again in 0.3s" in caplog.text
    assert len(srv.blob.ranges) == 2


def test_5xx_every_time_fails_after_the_attempts_as_unreachable(
    server: tuple[str, _Server], tmp_path: Path
) -> None:
    url, srv = server
    srv.blob = Blob(os.urandom(10 * KIB), faults=[Fault(at=i, status=500) for i in range(10)])

    with pytest.raises(ConnectionError, match=r"HTTP 500.*after 3 attempts"):
        _fetch(url, tmp_path / "big.bin", 10 * KIB, progress=None)
    assert len(srv.blob.ranges) == 3


@pytest.mark.parametrize(
    ("status", "error"), [(404, FileNotFoundError), (403, PermissionError)], ids=["404", "403"]
)
def test_missing_or_denied_ends_at_once_with_the_kind_the_retry_logic_reads(
    server: tuple[str, _Server], tmp_path: Path, status: int, error: type[Exception]
) -> None:
    url, srv = server
    srv.blob = Blob(os.urandom(10 * KIB), faults=[Fault(at=0, status=status)])

    with pytest.raises(
        error, match=rf"GET s3://bucket/big.bin bytes 0-10239: HTTP {status}"
    ) as got:
        _fetch(url, tmp_path / "big.bin", 10 * KIB, progress=None)
    assert len(srv.blob.ranges) == 1  # not retried
    assert "X-Amz-Signature" not in str(got.value)  # errors name the object, not the URL


def test_a_server_that_ignores_range_is_refused_not_written_at_the_wrong_offset(
    server: tuple[str, _Server], tmp_path: Path
) -> None:
    url, srv = server
    srv.blob = Blob(
        os.urandom(100 * KIB), faults=[Fault(at=i, ignore_range=True) for i in range(9)]
    )

    with pytest.raises(ConnectionError, match="ignored the Range"):
        _fetch(url, tmp_path / "big.bin", 100 * KIB, progress=None)


def test_a_stop_from_the_progress_hook_ends_every_worker(
    server: tuple[str, _Server], tmp_path: Path
) -> None:
    url, srv = server
    srv.blob = Blob(os.urandom(640 * KIB))  # 10 parts for 3 workers
    calls = [0]

    def stop_after_three(n: int) -> None:
        calls[0] += 1
        if calls[0] >= 3:
            raise Cancelled()

    with pytest.raises(Cancelled):
        _fetch(url, tmp_path / "big.bin", 640 * KIB, progress=stop_after_three)
    # The queued parts never asked the server: at most one range per worker went out.
    assert len(srv.blob.ranges) <= 3


class _ProxyHandler(BaseHTTPRequestHandler):
    """A forward proxy for plain HTTP: absolute-form requests in, the origin's answer out."""

    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def do_GET(self) -> None:
        import http.client
        from urllib.parse import urlsplit

        self.server.seen.append((self.path, self.headers.get("Proxy-Authorization")))
        parts = urlsplit(self.path)
        origin = http.client.HTTPConnection(parts.netloc, timeout=10)
        origin.request(
            "GET", f"{parts.path}?{parts.query}", headers={"Range": self.headers["Range"]}
        )
        answer = origin.getresponse()
        body = answer.read()
        self.send_response(answer.status)
        for name in ("Content-Range", "Retry-After"):
            if answer.getheader(name):
                self.send_header(name, answer.getheader(name))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        origin.close()

    def log_message(self, format: str, *args: Any) -> None:
        return


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    seen: list[tuple[str, str | None]]


@pytest.fixture
def proxy() -> Iterator[_ProxyServer]:
    srv = _ProxyServer(("127.0.0.1", 0), _ProxyHandler)
    srv.seen = []
    with _serving(srv):
        yield srv


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.mark.usefixtures("no_proxy_env")
def test_ranges_go_through_the_proxy_the_environment_names(
    server: tuple[str, _Server],
    proxy: _ProxyServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, srv = server
    srv.blob = Blob(os.urandom(100 * KIB))
    host, port = proxy.server_address[:2]
    monkeypatch.setenv("HTTP_PROXY", f"http://alice:s%40cret@{host}:{port}")

    _fetch(url, tmp_path / "big.bin", 100 * KIB, progress=None)

    assert (tmp_path / "big.bin").read_bytes() == srv.blob.data
    assert sorted(path for path, _ in proxy.seen) == [url, url]  # both ranges, absolute-form
    assert {auth for _, auth in proxy.seen} == {"Basic YWxpY2U6c0BjcmV0"}  # alice:s@cret


@pytest.mark.usefixtures("no_proxy_env")
def test_no_proxy_sends_the_ranges_straight_to_the_store(
    server: tuple[str, _Server],
    proxy: _ProxyServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, srv = server
    srv.blob = Blob(os.urandom(10 * KIB))
    host, port = proxy.server_address[:2]
    monkeypatch.setenv("HTTP_PROXY", f"http://{host}:{port}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")

    _fetch(url, tmp_path / "big.bin", 10 * KIB, progress=None)

    assert (tmp_path / "big.bin").read_bytes() == srv.blob.data
    assert proxy.seen == []


def test_a_direct_write_the_filesystem_refuses_falls_back_to_the_page_cache(
    server: tuple[str, _Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some filesystems open with O_DIRECT and then refuse the write (EINVAL, e.g. a larger
    logical block): every range goes on through the page cache, nothing lost."""
    import errno

    url, srv = server
    srv.blob = Blob(os.urandom(200 * KIB + 7))
    refused: list[int] = []  # the fd that opened "with O_DIRECT" and refuses writes

    def open_direct(path: str) -> int:
        refused.append(os.open(path, os.O_WRONLY))
        return refused[0]

    monkeypatch.setattr(ranged, "_open_direct", open_direct)
    real = os.pwrite

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if refused and fd == refused[0]:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)

    _fetch(url, tmp_path / "big.bin", len(srv.blob.data), progress=None)

    assert (tmp_path / "big.bin").read_bytes() == srv.blob.data


def test_a_cancelled_fetch_returns_only_once_its_workers_are_done(
    server: tuple[str, _Server], tmp_path: Path
) -> None:
    """The caller closes the file's fd when fetch returns; a worker still writing then could
    write into whatever file reuses that fd number."""
    url, srv = server
    srv.blob = Blob(os.urandom(64 * KIB))
    inside, release = threading.Event(), threading.Event()

    def slow_progress(n: int) -> None:  # the worker thread, busy between two buffers
        inside.set()
        release.wait(timeout=30)

    fetcher = ranged.RangedFetcher(attempts=1, backoff=FAST)
    fd = os.open(tmp_path / "big.bin", os.O_WRONLY | os.O_CREAT, 0o644)

    async def scenario() -> None:
        fetching = fetcher.fetch(
            lambda: url, "s3://b/k", fd, str(tmp_path / "big.bin"), 64 * KIB, slow_progress
        )
        task = asyncio.ensure_future(fetching)
        assert await asyncio.to_thread(inside.wait, 10)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=0.3)
        assert not done  # still waiting for its worker
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(scenario())
    finally:
        release.set()
        os.close(fd)


def test_a_range_of_another_version_is_refused_at_once(
    server: tuple[str, _Server], tmp_path: Path
) -> None:
    url, srv = server
    srv.blob = Blob(os.urandom(10 * KIB), etag='"v2"')  # replaced since the listing said v1

    with pytest.raises(IntegrityError, match="changed since the listing"):
        _fetch(url, tmp_path / "big.bin", 10 * KIB, progress=None, etag='"v1"')
    assert len(srv.blob.ranges) == 1  # not retried: the same listing cannot succeed
