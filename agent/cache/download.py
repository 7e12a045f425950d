"""Copying a listed dataset into the cache: parallel transfers, retries, integrity checks.

Transfers run as coroutines on the filesystem's I/O loop (fsspec's, or s3_obstore's own),
one task per transfer slot. Each file is checked by size and, where the store publishes
one, by MD5: hashed on the way in by s3_obstore, else read back from the page cache.
Remote errors leave as `SourceError` subclasses; local ones (disk full and friends) as
`CacheWriteError`.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.cache.source import RemoteFile, Source
from agent.cache.source_errors import (
    CacheWriteError,
    Cancelled,
    IntegrityError,
    RetryPolicy,
    SourceError,
    as_source_error,
    classify_remote,
)
from common.backoff import Backoff

__all__ = ["download"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Shared:
    """State the workers share: cancellation and whether ETags can be trusted as MD5s."""

    cancel: threading.Event = field(default_factory=threading.Event)
    etag_is_md5: bool = True  # flipped once, by any worker; a bool store needs no lock
    made: set[Path] = field(default_factory=set)  # directories already there: one mkdir each


def _md5_file(path: Path) -> str:
    # Read back from the page cache, in the worker thread (hashlib releases the GIL).
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, lambda: hashlib.md5(usedforsecurity=False)).hexdigest()


class _Reporter:
    """The progress callback a get makes (`set_size`, `relative_update`, as fsspec names
    them), as byte deltas; `take_back` undoes a failed try. Calls may come from the ranged
    fetcher's threads, one at a time."""

    def __init__(self, shared: _Shared, on_bytes: Callable[[int], None]) -> None:
        self._shared = shared
        self._on_bytes = on_bytes
        self.reported = 0

    def set_size(self, size: int | None) -> None:
        return None  # the listing already gave it

    def relative_update(self, inc: int = 1) -> None:
        if self._shared.cancel.is_set():
            raise Cancelled()  # raised inside get_file: stops this worker's transfer
        self.add(inc)

    def add(self, n: int) -> None:
        self._on_bytes(n)
        self.reported += n

    def take_back(self) -> None:
        self.add(-self.reported)


@dataclass(frozen=True, slots=True)
class _Landed:
    size: int
    problem: str  # "" when the file is as listed
    md5: str | None  # the content's MD5 when it was computed


def _settle(
    f: RemoteFile, target: Path, *, check_md5: bool, streamed_md5: str | None = None
) -> _Landed:
    """Compare the file with the listing (with the MD5 hashed while it streamed in, when the
    engine gives one, else read back). Durability comes later, for the whole tree at once
    (durable.flush_tree): one filesystem flush instead of a journal commit per file."""
    try:
        size = target.stat().st_size
    except OSError as exc:
        raise CacheWriteError(exc, target) from exc
    if f.size is not None and size != f.size:
        return _Landed(size, f"{f.path}: got {size} bytes, listed as {f.size}", None)
    if not (f.md5 and check_md5):
        return _Landed(size, "", None)
    got = streamed_md5 or _md5_file(target)
    wrong = f"{f.path}: MD5 {got} differs from the ETag {f.md5}"
    return _Landed(size, "" if got == f.md5 else wrong, got)


async def _get_once(
    fs: Any, f: RemoteFile, target: Path, reporter: _Reporter, *, check_md5: bool
) -> _Landed:
    """One streaming GET into `target` (s3fs resumes a broken body by itself; local files
    are a copyfile, which reports no progress until done), then `_settle`."""
    try:
        await fs._get_file(f.path, str(target), callback=reporter)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):  # our side, not the store's
            raise CacheWriteError(exc, target) from exc
        raise
    md5_of = getattr(fs, "md5_of", None)  # s3_obstore hashes on the way in
    streamed = md5_of(f.path) if md5_of is not None else None
    if f.md5 and check_md5 and streamed is None:  # hashing reads the file back: off the loop
        landed = await asyncio.to_thread(_settle, f, target, check_md5=True)
    else:
        landed = _settle(f, target, check_md5=bool(f.md5 and check_md5), streamed_md5=streamed)
    reporter.add(landed.size - reporter.reported)
    return landed


async def _fetch(
    fs: Any,
    f: RemoteFile,
    dest: Path,
    retry: RetryPolicy,
    shared: _Shared,
    on_bytes: Callable[[int], None],
) -> None:
    target = dest / f.rel
    if target.parent not in shared.made:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CacheWriteError(exc, target.parent) from exc
        shared.made.add(target.parent)
    seen: str | None = None
    backoff = Backoff(retry.backoff)
    for attempt in range(1, retry.attempts + 1):
        last = attempt >= retry.attempts
        reporter = _Reporter(shared, on_bytes)
        try:
            landed = await _get_once(fs, f, target, reporter, check_md5=shared.etag_is_md5)
        except (Cancelled, CacheWriteError, asyncio.CancelledError):
            reporter.take_back()
            raise
        except Exception as exc:
            reporter.take_back()
            if last or classify_remote(exc) != "transient":
                raise
            log.warning("%s: %s; fetching the file again", f.path, exc)
            await asyncio.to_thread(retry.sleep, backoff.next_delay())
            continue
        problem, got = landed.problem, landed.md5
        if problem and got is not None and got == seen:
            # the same bytes twice: this store's ETags are not MD5s (SSE-KMS, SSE-C)
            shared.etag_is_md5 = False
            log.warning("%s: ETag is not the content MD5; checking sizes only", f.path)
            problem = ""
        if not problem:
            return
        seen = got
        reporter.take_back()
        if last:
            raise IntegrityError(problem)
        log.warning("%s; fetching the file again", problem)
        await asyncio.to_thread(retry.sleep, backoff.next_delay())


async def _download_all(
    fs: Any,
    order: Sequence[RemoteFile],
    dest: Path,
    *,
    protocol: str,
    parallel: int,
    retry: RetryPolicy,
    shared: _Shared,
    on_bytes: Callable[[int], None],
    on_file: Callable[[], None],
) -> BaseException | None:
    """Every file on the filesystem's event loop by `parallel` workers that take files from
    one shared iterator (a task per worker, not per file: datasets may hold millions); the
    first failure stops the others and is returned."""
    pending = iter(order)  # one event loop thread: no two workers take the same file

    async def worker() -> None:
        for f in pending:
            if shared.cancel.is_set():
                return
            try:
                await _fetch(fs, f, dest, retry, shared, on_bytes)
            except (SourceError, CacheWriteError, IntegrityError, Cancelled):
                raise
            except Exception as exc:  # a client-library error: say which object and what kind
                url = f.path if "://" in f.path else f"{protocol}://{f.path}"
                raise as_source_error(exc, url, retry.attempts) from exc
            on_file()

    workers = [asyncio.ensure_future(worker()) for _ in range(max(1, parallel))]
    try:
        done, _ = await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        shared.cancel.set()  # no-op when all succeeded; stops callbacks otherwise
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    failures = [t.exception() for t in done if not t.cancelled() and t.exception() is not None]
    real = [e for e in failures if not isinstance(e, Cancelled)]
    return (real or failures or [None])[0]


def download(
    src: Source,
    files: Sequence[RemoteFile],
    dest: Path,
    *,
    parallel: int,
    retry: RetryPolicy,
    on_bytes: Callable[[int], None],
    on_file: Callable[[], None],
) -> None:
    """Copy every file under `dest`, `parallel` at a time, largest first; stop at the first
    failure and raise it (SourceError, CacheWriteError or IntegrityError).

    The transfers run as coroutines on the filesystem's I/O loop (s3fs, gcsfs, HTTP and
    s3_obstore are async; a sync filesystem such as file:// is wrapped, each call in a
    thread): one loop serves many requests at far less cost than one thread per transfer.
    Hashing and fsync run in threads so they do not stall the loop.
    """
    fs = src.fs
    if not getattr(fs, "async_impl", False):
        from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper

        fs = AsyncFileSystemWrapper(fs)
    shared = _Shared()
    order = sorted(files, key=lambda f: (-(f.size or 0), f.rel))
    work = _download_all(
        fs,
        order,
        dest,
        protocol=src.protocol,
        parallel=parallel,
        retry=retry,
        shared=shared,
        on_bytes=on_bytes,
        on_file=on_file,
    )
    future = asyncio.run_coroutine_threadsafe(work, fs.loop)
    try:
        failure = future.result()
    except BaseException:
        # SIGTERM (SystemExit) or ^C while waiting: stop the transfers, do not wait for them;
        # the caller removes the temporary directory and the process exits (cli/prefetch.py).
        shared.cancel.set()
        future.cancel()
        raise
    if failure is not None:
        raise failure
