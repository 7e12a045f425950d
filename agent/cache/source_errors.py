"""What can go wrong reading a dataset source, and what to do about it: the error types the
prefetch reports (each maps to one exit code in cli/prefetch.py), how a client-library failure is
classified (missing, denied, transient), and the retry policy for transient ones.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

from common.backoff import Backoff, BackoffPolicy

__all__ = [
    "CHANGED",
    "CacheWriteError",
    "Cancelled",
    "IntegrityError",
    "RemoteKind",
    "RetryPolicy",
    "SourceAccessDenied",
    "SourceError",
    "SourceInvalid",
    "SourceNotFound",
    "SourceUnreachable",
    "as_source_error",
    "classify_remote",
    "missing_credential",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


class SourceError(Exception):
    """The source cannot be read; the message names the URL and what to do."""


class SourceNotFound(SourceError):
    pass


class SourceAccessDenied(SourceError):
    pass


class SourceUnreachable(SourceError):
    pass


class SourceInvalid(SourceError):
    pass


class IntegrityError(Exception):
    """A file arrived with the wrong size or checksum, every time it was fetched, or is no
    longer the version the listing named."""


# The store answered 412 to If-Match: retrying the same listing cannot succeed.
CHANGED = "changed since the listing (its ETag differs); the next prefetch lists it again"


class Cancelled(Exception):
    """Another worker failed; this one stops between chunks."""


class CacheWriteError(Exception):
    """Writing into the cache failed (disk full, read-only, permissions)."""

    def __init__(self, exc: OSError, path: Path) -> None:
        self.disk_full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        what = "disk full" if self.disk_full else (exc.strerror or str(exc))
        super().__init__(f"{what} writing {path}")


RemoteKind = Literal["not_found", "denied", "transient", "other"]
# Transient failures of the HTTP stacks under fsspec, by class name so that neither botocore nor
# aiohttp has to be imported here (ConnectionError also matches botocore's class of that name).
_TRANSIENT_NAMES = {
    "ConnectionError",
    "HTTPClientError",
    "ClientConnectionError",
    "ClientPayloadError",
    "ServerTimeoutError",
    "FSTimeoutError",
    "IncompleteReadError",
    "ResponseStreamingError",
}


def classify_remote(exc: BaseException) -> RemoteKind:
    """How a failure talking to the source should be treated."""
    if isinstance(exc, FileNotFoundError):
        # fsspec's HTTP filesystem reports every failed HEAD/GET (403, refused…) this way
        cause = exc.__cause__
        if cause is not None and not isinstance(cause, FileNotFoundError):
            kind = classify_remote(cause)
            return kind if kind != "other" else "not_found"
        return "not_found"
    if isinstance(exc, PermissionError):
        return "denied"
    status = getattr(exc, "status", None)  # aiohttp.ClientResponseError (http sources)
    if isinstance(status, int):
        if status in (401, 403):
            return "denied"
        if status in (404, 410):
            return "not_found"
        return "transient" if status == 429 or status >= 500 else "other"
    if isinstance(exc, ConnectionError | TimeoutError):
        return "transient"
    if any(cls.__name__ in _TRANSIENT_NAMES for cls in type(exc).__mro__):
        return "transient"
    # s3fs turns S3 error codes it has no Python exception for (InternalError, SlowDown…) into EIO
    if isinstance(exc, OSError) and exc.errno == errno.EIO:
        return "transient"
    return "other"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Attempts and capped exponential backoff with jitter (common.backoff) for transient
    failures, on top of the client library's own retries; `sleep` is injectable for tests."""

    attempts: int = 5
    backoff: BackoffPolicy = field(default_factory=lambda: BackoffPolicy(initial=0.5, cap=20.0))
    sleep: Callable[[float], None] = time.sleep

    def call(self, fn: Callable[[], T], *, what: str) -> T:
        backoff = Backoff(self.backoff)
        for attempt in range(1, self.attempts + 1):
            try:
                return fn()
            except Exception as exc:
                if classify_remote(exc) != "transient" or attempt >= self.attempts:
                    raise
                pause = backoff.next_delay()
                log.warning(
                    "%s failed (%s: %s); retry %d/%d in %.1fs",
                    what,
                    type(exc).__name__,
                    exc,
                    attempt,
                    self.attempts - 1,
                    pause,
                )
                self.sleep(pause)
        raise ValueError("RetryPolicy.attempts must be at least 1")


# Where each store's client looks for credentials, as environment variables (a policy's
# dataset `sourceSecret` is the prefetch container's envFrom); any one of them may suffice.
_CREDENTIALS = {
    "s3": ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
           "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"),
    "gs": ("GOOGLE_APPLICATION_CREDENTIALS",),
}  # fmt: skip
_DETAIL_CHARS = 200


def missing_credential(url: str) -> str | None:
    """What credential the environment lacks for this source; None when it has one (or the
    source needs none we know of). Instance roles (EC2, GKE metadata) are not seen here."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else "file"
    names = _CREDENTIALS.get({"s3a": "s3", "gcs": "gs"}.get(scheme, scheme))
    if names is None or any(os.environ.get(name) for name in names):
        return None
    if names[0] == "AWS_ACCESS_KEY_ID":
        return "no credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are unset"
    return f"no credentials: {names[0]} is unset"


def _first_line(exc: Exception) -> str:
    """The client library's message, one line: some put a multi-line debug dump after it."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"


def as_source_error(exc: Exception, url: str, attempts: int) -> SourceError:
    kind = classify_remote(exc)
    detail = _first_line(exc)
    if kind == "not_found":
        return SourceNotFound(f"{url}: no such bucket, prefix or object ({detail})")
    if kind == "denied":
        missing = missing_credential(url)
        if missing is not None:
            return SourceAccessDenied(
                f"{url}: permission denied, {missing} (give the dataset a sourceSecret, "
                f"docs/policies.md)"
            )
        return SourceAccessDenied(f"{url}: permission denied ({detail}); check the credentials")
    if kind == "transient":
        return SourceUnreachable(f"{url}: unreachable after {attempts} attempts ({detail})")
    return SourceError(f"{url}: {detail}")
