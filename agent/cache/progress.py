"""Download progress: thread-safe counters, a reporter thread that logs every few seconds, and
pure formatting of what it logs (bytes, files, rate, ETA) and of the final one-line summary.

Lines go through logging (stderr), so `--log-format json` keeps them machine-readable. The
outcome of a prefetch that succeeded is also its init container's termination message
(`PrefetchReport`), which the node's agent reads from the pod's status to count hits, bytes
and evictions that could not make room (agent/sync/pod_events/prefetches.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, NonNegativeInt, ValidationError

__all__ = [
    "REPORT_PREFIX",
    "PrefetchReport",
    "ProgressReporter",
    "ProgressSnapshot",
    "format_bytes",
    "format_progress",
    "format_summary",
    "parse_report",
]

log = logging.getLogger(__name__)

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


@dataclass(frozen=True, slots=True)
class ProgressSnapshot:
    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int
    elapsed_s: float

    @property
    def rate(self) -> float:
        """Bytes per second so far (0 before any time has passed)."""
        return self.bytes_done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the average rate so far; None while the rate is unknown."""
        if self.rate <= 0:
            return None
        return max(self.bytes_total - self.bytes_done, 0) / self.rate


def format_bytes(n: float) -> str:
    value = float(n)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_UNITS[-1]}"  # unreachable; keeps type checkers content


def _format_duration(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def format_progress(snap: ProgressSnapshot) -> str:
    pct = 100.0 * snap.bytes_done / snap.bytes_total if snap.bytes_total else 100.0
    eta = snap.eta_s
    return (
        f"{format_bytes(snap.bytes_done)} / {format_bytes(snap.bytes_total)} ({pct:.1f}%), "
        f"{snap.files_done}/{snap.files_total} files, {format_bytes(snap.rate)}/s, "
        f"ETA {_format_duration(eta) if eta is not None else '?'}"
    )


def format_summary(snap: ProgressSnapshot, *, what: str, source: str) -> str:
    return (
        f"prefetched {what}: {snap.files_done} files, {format_bytes(snap.bytes_done)} "
        f"in {snap.elapsed_s:.1f}s ({format_bytes(snap.rate)}/s) from {source}"
    )


class ProgressReporter:
    """Counters updated by transfer workers; logs a progress line every `interval_s` while
    running (as a context manager). `add_bytes` takes negative values when a file restarts."""

    def __init__(
        self,
        *,
        bytes_total: int,
        files_total: int,
        interval_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._bytes_total = bytes_total
        self._files_total = files_total
        self._interval_s = interval_s
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self._bytes = 0
        self._files = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add_bytes(self, n: int) -> None:
        with self._lock:
            self._bytes += n

    def file_done(self) -> None:
        with self._lock:
            self._files += 1

    def snapshot(self) -> ProgressSnapshot:
        with self._lock:
            return ProgressSnapshot(
                bytes_done=self._bytes,
                bytes_total=self._bytes_total,
                files_done=self._files,
                files_total=self._files_total,
                elapsed_s=self._clock() - self._started,
            )

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            snap = self.snapshot()
            log.info(
                "progress: %s",
                format_progress(snap),
                extra={"bytes_done": snap.bytes_done, "files_done": snap.files_done},
            )

    def __enter__(self) -> ProgressReporter:
        self._started = self._clock()
        self._thread = threading.Thread(target=self._loop, name="prefetch-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


# The termination message's one line: this prefix, then the report as JSON.
REPORT_PREFIX: Final = "topoplace-prefetch: "


class PrefetchReport(BaseModel):
    """A successful prefetch as its termination message says it: a cache `hit` or the
    version `downloaded` (`bytes` of it), and whether `--max-cache-bytes` could not be kept
    because evicting all it may did not free enough (what is left is leased by pods, being
    written, of the dataset being fetched, or the version alone is over the limit)."""

    model_config = ConfigDict(frozen=True, extra="ignore")  # ignore: a newer prefetcher's fields

    outcome: Literal["hit", "downloaded"]
    bytes: NonNegativeInt = 0
    evictions_blocked: bool = False

    def line(self) -> str:
        return REPORT_PREFIX + self.model_dump_json()


def parse_report(message: str) -> PrefetchReport | None:
    """The report in a termination message; None when it holds none (a failure's reason, an
    older prefetcher). Raises ValueError naming what is wrong with a malformed one."""
    line = next((ln for ln in message.splitlines() if ln.startswith(REPORT_PREFIX)), None)
    if line is None:
        return None
    try:
        return PrefetchReport.model_validate_json(line[len(REPORT_PREFIX) :])
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'report'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(f"malformed prefetch report {line!r}: {problems}") from None
