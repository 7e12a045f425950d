"""S3 through obstore (Rust object_store): the transfer engine for `s3://` sources.

Chosen over s3fs by measurement (benchmarks/results.md, "Prefetch next to the fastest S3
copiers"): request signing and HTTP in Rust leave the Python side almost idle.

`ObstoreS3` offers the few filesystem calls the prefetch makes (`info`, `find`, `_get_file`,
`loop`, `async_impl`), as fsspec names them, so listing, retries, integrity checks and error
classification stay the same for every source. Errors come out as the built-in exceptions
`source_errors.classify_remote` understands. Three paths, by object size:
- up to `SMALL_MAX`: one ranged GET (the listed size and one byte more), a single await
  bridged from Rust (each costs a thread wake-up: more than a 4 KiB file's transfer);
- larger, below `RANGED_MIN` or with an MD5 ETag (single-part uploads): one stream, hashed
  on the way in when there is an MD5 (no read-back, `md5_of`), handed to the kernel's
  writeback as it lands when it is large;
- `RANGED_MIN` and up without an MD5 (multipart uploads): parallel ranges written straight
  to disk by ranged.py.
Each GET names the version listed (If-Match, or the size for small ones).
Small files are not written back one by one: the prefetch's one syncfs flushes them
together. Memory stays bounded whatever the object sizes.
"""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import os
import re
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agent.cache.durable import libc_call
from agent.cache.source_errors import CHANGED, Cancelled, IntegrityError

if TYPE_CHECKING:  # obstore is imported where used: a cold start that reads no s3:// skips it
    from obstore import GetOptions
    from obstore.store import ClientConfig

__all__ = ["RANGED_MIN", "ObstoreS3", "available"]

RANGED_MIN = 128 * 1024 * 1024
SMALL_MAX = 1024 * 1024  # up to this size an object is one ranged GET, held whole in memory
_CHUNK = 1024 * 1024  # stream buffer: files in flight × 1 MiB at most
_SIGNED_FOR = timedelta(hours=1)  # a presigned range URL is used at once; retries sign anew
_STATUS = re.compile(r"status code: (\d{3})")
_HEX_MD5 = re.compile(r"[0-9a-f]{32}")


def available() -> bool:
    try:
        import obstore  # noqa: F401
    except ImportError:
        return False
    return True


def _builtin(exc: BaseException, what: str) -> BaseException:
    """obstore's error as the built-in exception kind the retry and exit-code logic reads."""
    from obstore import exceptions as oe

    text = f"{what}: {type(exc).__name__}: {exc}"
    if isinstance(exc, oe.PreconditionError):  # If-Match: the object is not what was listed
        return IntegrityError(f"{what}: {CHANGED}")
    if isinstance(exc, oe.NotFoundError):
        return FileNotFoundError(text)
    if isinstance(exc, oe.PermissionDeniedError | oe.UnauthenticatedError):
        return PermissionError(text)
    if isinstance(exc, oe.BaseError):
        # object_store reports some answers only in its message (a LIST of a missing bucket)
        status = _STATUS.search(str(exc))
        code = int(status.group(1)) if status else 0
        if code in (404, 410):
            return FileNotFoundError(text)
        if code in (401, 403):
            return PermissionError(text)
        return ConnectionError(text)  # refused/reset, timeouts, 5xx after its retries
    return exc


class ObstoreS3:
    """One bucket's objects, named `bucket/key` as s3fs names them."""

    async_impl = True

    def __init__(self, bucket: str, *, endpoint: str | None, attempts: int = 5) -> None:
        from obstore.store import S3Store

        options: ClientConfig = {"timeout": "60s", "connect_timeout": "10s"}
        if endpoint and endpoint.startswith("http://"):
            options["allow_http"] = True
        # The store reads AWS_* from the environment (keys, region, session token, web
        # identity) as the AWS SDKs do; an explicit endpoint wins over AWS_ENDPOINT_URL.
        # (As this config key: obstore lets $AWS_ENDPOINT_URL_S3 override an `endpoint=`.)
        kwargs: dict[str, Any] = {"config": {"aws_endpoint_url_s3": endpoint}} if endpoint else {}
        if not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
            kwargs["region"] = "us-east-1"
        self.bucket = bucket
        self.store = S3Store(
            bucket,
            client_options=options,
            retry_config={
                "max_retries": max(0, attempts - 1),
                "retry_timeout": timedelta(minutes=2),
                "backoff": {
                    "init_backoff": timedelta(milliseconds=200),
                    "base": 2,
                    "max_backoff": timedelta(seconds=15),
                },
            },
            **kwargs,
        )
        self.loop = _io_loop()  # the I/O thread download.py runs transfers on
        self._sizes: dict[str, int] = {}
        self._etags: dict[str, str] = {}  # only single-part ETags are MD5s worth computing
        self._md5: dict[str, str] = {}  # hashed on the way in: no read-back (md5_of)
        self._attempts = attempts
        self._fetcher: Any = None  # ranged.RangedFetcher, imported with its first large object

    def _key(self, path: str) -> str:
        bucket, _, key = path.partition("/")
        if bucket != self.bucket:
            raise ValueError(f"{path!r} is not in bucket {self.bucket!r}")
        return key

    def _head(self, key: str) -> Any:
        import obstore

        async def head() -> Any:  # obstore's futures belong to the loop that awaits them
            return await obstore.head_async(self.store, key)

        return asyncio.run_coroutine_threadsafe(head(), self.loop).result()

    # --- listing ----------------------------------------------------------------------
    def info(self, path: str) -> dict[str, Any]:
        key = self._key(path)
        try:
            meta = self._head(key) if key else None
        except Exception as exc:
            from obstore import exceptions as oe

            if not isinstance(exc, oe.NotFoundError):
                raise _builtin(exc, f"HEAD {path}") from exc
            meta = None
        if meta is not None:
            self._sizes[path] = int(meta["size"])
            self._etags[path] = str(meta["e_tag"] or "")
            return {"name": path, "type": "file", "size": meta["size"], "ETag": meta["e_tag"]}
        if self.find(path):
            return {"name": path, "type": "directory", "size": 0}
        raise FileNotFoundError(f"{path}: no such object or prefix")

    def find(self, path: str, detail: bool = True) -> dict[str, dict[str, Any]]:
        """Every object below the prefix `path`, flat (no delimiter walk: one page per
        thousand keys, however deep the tree)."""
        key = self._key(path.rstrip("/"))
        prefix = f"{key}/" if key else ""
        try:
            found = dict(self._list(prefix))
        except Exception as exc:
            raise _builtin(exc, f"LIST {path}") from exc
        for name, entry in found.items():
            self._sizes[name] = int(entry["size"])
            self._etags[name] = str(entry["ETag"] or "")
        return found

    def _list(self, prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
        import obstore

        for batch in obstore.list(self.store, prefix=prefix or None, chunk_size=1000):
            for meta in batch:
                name = f"{self.bucket}/{meta['path']}"
                size, etag = meta["size"], meta["e_tag"]
                yield name, {"name": name, "type": "file", "size": size, "ETag": etag}

    # --- transfer ---------------------------------------------------------------------
    def md5_of(self, path: str) -> str | None:
        """The MD5 of what the last `_get_file` of `path` wrote, hashed as it streamed."""
        return self._md5.pop(path, None)

    async def _get_file(self, rpath: str, lpath: str, callback: Any = None, **_: Any) -> None:
        size = self._sizes.get(rpath)
        if callback is not None and size is not None:
            callback.set_size(size)
        etag = self._etags.get(rpath, "").strip('"').lower()
        md5 = hashlib.md5(usedforsecurity=False) if _HEX_MD5.fullmatch(etag) else None
        try:
            if size is not None and size <= SMALL_MAX:
                await self._small(rpath, lpath, size, md5, callback)
            else:
                fd = os.open(lpath, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
                try:
                    # An MD5 must be hashed in order: one stream. Else large objects in parts.
                    if md5 is None and size is not None and size >= RANGED_MIN:
                        await self._ranged(rpath, fd, lpath, size, callback)
                    else:
                        await self._streamed(rpath, fd, callback, md5, size)
                finally:
                    os.close(fd)
            if md5 is not None:
                self._md5[rpath] = md5.hexdigest()
        except (OSError, Cancelled, IntegrityError, asyncio.CancelledError):
            raise  # ours (disk, a changed object), download.py's stop signal, or a cancel
        except Exception as exc:
            raise _builtin(exc, f"GET {rpath}") from exc

    async def _small(self, rpath: str, lpath: str, size: int, md5: Any, callback: Any) -> None:
        """A small object as one ranged GET: one await bridged from Rust per file (a GET and
        then its body take two; worker threads cost more still in wake-ups, measured). An
        empty object needs no request at all."""
        import obstore

        key = self._key(rpath)
        # One byte past the listed size: an object that grew since the listing arrives too
        # long and fails the size check, as a whole GET would (servers clip the range).
        data = memoryview(
            await obstore.get_range_async(self.store, key, start=0, end=size + 1) if size else b""
        )
        if md5 is not None:
            md5.update(data)
        fd = os.open(lpath, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            _pwrite_all(fd, data, 0, False)
        finally:
            os.close(fd)
        if callback is not None:
            callback.relative_update(len(data))

    async def _streamed(
        self, rpath: str, fd: int, callback: Any, md5: Any, size: int | None
    ) -> None:
        """One GET written as it arrives (an object of unknown size, or one with an MD5 to
        hash in order). A large object's chunks go to the kernel's writeback at once, so
        the final syncfs has little left; smaller ones are left to that one syncfs (writing
        each back alone would queue thousands of tiny I/Os)."""
        import obstore

        etag = self._etags.get(rpath)
        options: GetOptions | None = {"if_match": etag} if etag else None  # listed, or a 412
        resp = await obstore.get_async(self.store, self._key(rpath), options=options)
        writeback = size is not None and size >= RANGED_MIN
        offset = 0
        async for chunk in resp.stream(min_chunk_size=_CHUNK):
            view = memoryview(chunk)
            if md5 is not None:  # the bytes just received, still in cache: cheaper than a re-read
                md5.update(view)
            _pwrite_all(fd, view, offset, writeback)
            offset += len(view)
            if callback is not None:
                callback.relative_update(len(view))

    async def _ranged(self, rpath: str, fd: int, lpath: str, size: int, callback: Any) -> None:
        """Parallel ranges written straight to disk (ranged.py), each from a presigned URL."""
        import obstore

        key = self._key(rpath)
        if self._fetcher is None:  # made on first use: most datasets have no large object
            from agent.cache.ranged import RangedFetcher  # http.client and ssl: ~15 ms

            self._fetcher = RangedFetcher(attempts=self._attempts)

        def sign() -> str:
            return str(obstore.sign(self.store, "GET", key, _SIGNED_FOR))

        def progress(n: int) -> None:
            if callback is not None:
                callback.relative_update(n)  # download.py's hook raises Cancelled to stop us

        etag = self._etags.get(rpath) or None
        await self._fetcher.fetch(sign, f"s3://{rpath}", fd, lpath, size, progress, etag=etag)


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _io_loop() -> asyncio.AbstractEventLoop:
    """One event loop on a daemon thread for the process, made on first use (as fsspec
    does for its filesystems, without importing fsspec: tens of ms at every start)."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="prefetch-io", daemon=True).start()
            _LOOP = loop
        return _LOOP


# sync_file_range(SYNC_FILE_RANGE_WRITE): start flushing a range, do not wait for it.
_WRITEBACK = libc_call(
    "sync_file_range", [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
)


def _pwrite_all(fd: int, view: memoryview, offset: int, writeback: bool) -> None:
    start, length = offset, len(view)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
    if writeback and _WRITEBACK is not None:
        _WRITEBACK(fd, start, length, 2)  # SYNC_FILE_RANGE_WRITE; durability is syncfs's job
