"""Large objects as parallel byte ranges, each written at its offset, straight to the disk.

Why not obstore's own stream for these: measured on loopback against a Go S3 server
(benchmarks/results.md), handing multi-MiB chunks from Rust to Python and copying them into
the page cache cost more CPU than the copy itself, and the dirty pages then made the final
syncfs wait for the disk. Here each worker thread GETs a presigned URL (obstore signs it:
its credential chain, session tokens included) with the standard library's http.client,
reads the body with `readinto` into one reused page-aligned buffer, and writes full buffers
with O_DIRECT: no allocation per chunk, no second copy, nothing left for syncfs to flush
but metadata. Where the filesystem refuses O_DIRECT (tmpfs, some network filesystems) the
same buffers are written through the page cache instead. (Writing one buffer while a
second fills was measured too: no faster here, so not kept.)

A failed range is asked again from the last byte written (a reused keep-alive connection
the server has closed is retried at once; 5xx, 429 and broken bodies after a backoff that
obeys Retry-After); 404 and 403 end the object at once. Memory: one `BUF` per worker.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import http.client
import logging
import mmap
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from agent.cache.durable import libc_call
from agent.cache.http_pool import Connections
from agent.cache.source_errors import CHANGED, Cancelled, IntegrityError
from common.backoff import Backoff, BackoffPolicy

__all__ = ["BUF", "MAX_PARTS", "PART", "RangedFetcher"]

log = logging.getLogger(__name__)

PART = 64 * 1024 * 1024
BUF = 1024 * 1024  # per worker; a multiple of _ALIGN, and PART a multiple of it
MAX_PARTS = 8  # worker threads, i.e. ranges in flight for the whole prefetch
_ALIGN = 4096  # O_DIRECT wants offsets, lengths and buffers aligned to the logical block
_TIMEOUT_S = 30.0


# Real allocation or EOPNOTSUPP, never glibc's posix_fallocate emulation (writing zeros).
_FALLOCATE = libc_call("fallocate", [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64])


class _Transient(Exception):
    """This range may succeed if asked again; `retry_after` is the server's own wait."""

    def __init__(self, text: str, retry_after: float | None = None) -> None:
        super().__init__(text)
        self.retry_after = retry_after


def _status_error(status: int, what: str, body: bytes, retry_after: str | None) -> Exception:
    text = f"{what}: HTTP {status} {body[:300].decode('utf-8', 'replace').strip()}".rstrip()
    if status in (404, 410):
        return FileNotFoundError(text)
    if status in (401, 403):
        return PermissionError(text)
    if status == 412:
        return IntegrityError(f"{what}: {CHANGED}")
    if status == 429 or status >= 500:
        try:
            wait = float(retry_after) if retry_after else None
        except ValueError:
            wait = None  # an HTTP date: rare from S3; our backoff decides
        return _Transient(text, wait)
    return ConnectionError(text)  # 416 and friends: the object changed under us


@dataclass(slots=True)
class _Cursor:
    """One range: the next byte to write, and where the range ends."""

    offset: int
    end: int


@dataclass(slots=True)
class _Target:
    """The file being filled: through `direct_fd` while the filesystem takes O_DIRECT, else
    through the page cache. Both fds are closed by their owners only once every worker is
    done: a number closed early could be reused by another open, and get another's bytes."""

    path: str
    size: int
    buffered: int
    direct_fd: int | None
    etag: str | None  # sent as If-Match
    use_direct: bool = True

    def write(self, view: memoryview, length: int, offset: int) -> None:
        if self.use_direct and self.direct_fd is not None:
            padded = -(-length // _ALIGN) * _ALIGN  # only the file's tail is short; cut later
            try:
                if os.pwrite(self.direct_fd, view[:padded], offset) == padded:
                    return
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
            if self.use_direct:  # refused (or short): the page cache from now on, every range
                log.debug("%s: O_DIRECT refused; writing through the page cache", self.path)
                self.use_direct = False
        view = view[:length]
        while view:
            written = os.pwrite(self.buffered, view, offset)
            view, offset = view[written:], offset + written


class RangedFetcher:
    """A pool of worker threads, each with one buffer and one keep-alive connection per host
    (http_pool.py)."""

    def __init__(self, *, attempts: int, backoff: BackoffPolicy | None = None) -> None:
        self._attempts = max(1, attempts)
        self._backoff = backoff or BackoffPolicy(initial=0.2, cap=15.0, floor=0.05)
        self._pool = ThreadPoolExecutor(MAX_PARTS, thread_name_prefix="prefetch-range")
        self._local = threading.local()
        self._conns = Connections(_TIMEOUT_S)

    async def fetch(
        self,
        sign: Callable[[], str],
        what: str,
        fd: int,
        path: str,
        size: int,
        progress: Callable[[int], None],
        *,
        etag: str | None = None,
    ) -> None:
        """Fill `fd` (open on `path`) with the object's `size` bytes; `sign()` gives a fresh
        presigned GET URL; `progress(n)` is called from the workers, one at a time, and may
        raise (Cancelled) to stop them. With the listed `etag`, every range carries If-Match:
        ranges of two versions are never stitched together."""
        if _FALLOCATE is None or _FALLOCATE(fd, 0, 0, size) != 0:
            os.ftruncate(fd, size)  # no real allocation here: sparse, filled by the ranges
        target = _Target(path, size, fd, _open_direct(path), etag)
        stop = threading.Event()
        lock = threading.Lock()

        def report(n: int) -> None:
            with lock:
                progress(n)

        futures = [
            self._pool.submit(self._part, sign, what, target, start, stop, report)
            for start in range(0, size, PART)
        ]
        try:
            await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        finally:
            stop.set()  # the others end at their next buffer; their fds must outlive them
            cancelled = await _wait_all(futures)
            if target.direct_fd is not None:
                os.close(target.direct_fd)
            os.ftruncate(fd, size)  # the padded tail of a direct write
            if cancelled:
                raise asyncio.CancelledError()

    def _part(
        self,
        sign: Callable[[], str],
        what: str,
        target: _Target,
        start: int,
        stop: threading.Event,
        report: Callable[[int], None],
    ) -> None:
        cursor = _Cursor(start, min(target.size, start + PART))
        backoff = Backoff(self._backoff)
        try:
            while cursor.offset < cursor.end:
                if stop.is_set():
                    raise Cancelled()
                before = cursor.offset
                try:
                    self._get(sign(), what, target, cursor, stop, report)
                except _Transient as exc:
                    if cursor.offset > before:
                        backoff.reset()  # it was moving: a new streak of failures starts here
                    if backoff.attempts + 1 >= self._attempts:
                        raise ConnectionError(f"{exc} (after {self._attempts} attempts)") from exc
                    delay = backoff.next_delay(retry_after=exc.retry_after)
                    log.info("%s; asking from byte %d again in %.1fs", exc, cursor.offset, delay)
                    if stop.wait(delay):
                        raise Cancelled() from exc
        except BaseException:
            stop.set()  # from this thread, at once: queued ranges must not start meanwhile
            raise

    def _buffer(self) -> memoryview:
        local = self._local
        if not hasattr(local, "buf"):
            local.buf = mmap.mmap(-1, BUF)  # page-aligned, as O_DIRECT needs
        return memoryview(local.buf)

    def _get(
        self,
        url: str,
        what: str,
        target: _Target,
        cursor: _Cursor,
        stop: threading.Event,
        report: Callable[[int], None],
    ) -> None:
        """One ranged GET from the cursor to its end; the cursor follows every write."""
        offset, end = cursor.offset, cursor.end
        span = f"bytes {offset}-{end - 1}"
        for fresh in (False, True):
            conn, target_url, headers = self._conns.get(url, fresh=fresh)
            reused = conn.sock is not None
            headers = {**headers, "Range": f"bytes={offset}-{end - 1}"}
            if target.etag:
                headers["If-Match"] = target.etag
            try:
                conn.request("GET", target_url, headers=headers)
                resp = conn.getresponse()
                break
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if not reused or fresh:  # a keep-alive the server closed gets one fresh try
                    raise _Transient(f"GET {what} {span}: {type(exc).__name__}: {exc}") from exc
        if resp.status != 206 or not (resp.getheader("Content-Range") or "").startswith(span):
            body = resp.read(4096) if resp.status != 200 else b"(the server ignored the Range)"
            conn.close()
            retry_after = resp.getheader("Retry-After")
            raise _status_error(resp.status, f"GET {what} {span}", body, retry_after)
        view = self._buffer()
        fill = 0
        try:
            while cursor.offset + fill < end:
                n = resp.readinto(view[fill : min(BUF, end - cursor.offset)])
                if not n:
                    at = cursor.offset + fill
                    raise _Transient(f"GET {what} {span}: the body ended at byte {at}")
                fill += n
                if fill == BUF or cursor.offset + fill == end:
                    target.write(view, fill, cursor.offset)  # disk errors: OSError, unretried
                    cursor.offset += fill
                    report(fill)
                    fill = 0
                    if stop.is_set():
                        raise Cancelled()
        except (Cancelled, _Transient):
            conn.close()
            raise
        except (http.client.HTTPException, ConnectionError, TimeoutError) as exc:
            conn.close()
            raise _Transient(f"GET {what} {span}: {type(exc).__name__}: {exc}") from exc


async def _wait_all(futures: list[Future[None]]) -> bool:
    """Wait for every worker, through a cancel too (they write to fds that are closed after
    this returns); True when a cancel came meanwhile. The threads' own futures are what is
    watched: gather's asyncio wrappers read as done once cancelled, their threads running."""
    cancelled = False
    waiting = [asyncio.wrap_future(f) for f in futures if not f.done()]
    while not all(w.done() for w in waiting):
        try:
            await asyncio.wait(waiting)  # never cancels what it waits on
        except asyncio.CancelledError:
            cancelled = True
    for w in waiting:
        if not w.cancelled():
            w.exception()  # seen: the failure that matters already left through gather
    return cancelled


def _open_direct(path: str) -> int | None:
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_CLOEXEC | flag)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        return None  # this filesystem does not do O_DIRECT
