"""One writer per dataset per node: an exclusive `flock` on `<root>/<name>/.topoplace-lock`.

flock (not a pid file) because the kernel drops it when the holder dies, SIGKILL included, so a
killed prefetch never leaves the dataset locked. The lock file is never deleted: a process
blocked on the old inode would otherwise lock a file nobody else sees. The holder writes its
pid into the file only so that waiters can say whom they wait for (a pid in the holder's own
PID namespace: another pod's init container reports its own numbering).
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["DatasetLock", "is_locked_by_other", "try_lock"]

log = logging.getLogger(__name__)


def _open_lock_file(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "?"
    return text if text.isdigit() else "?"


class DatasetLock:
    """Exclusive lock on one dataset's lock file; a context manager that waits for it.

    While waiting it logs "waiting for lock … held by pid N" every `log_every_s` seconds.
    `clock` and `sleep` are injectable so tests never really wait.
    """

    def __init__(
        self,
        path: Path,
        *,
        poll_s: float = 0.2,
        log_every_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.path = path
        self._poll_s = poll_s
        self._log_every_s = log_every_s
        self._clock = clock
        self._sleep = sleep
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; never blocks."""
        fd = _open_lock_file(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._write_pid(fd)
        return True

    def acquire(self) -> None:
        """Wait for the lock, polling so that the wait can be reported as it goes."""
        next_log = self._clock()
        while not self.try_acquire():
            now = self._clock()
            if now >= next_log:
                fd = _open_lock_file(self.path)
                try:
                    holder = _read_holder(fd)
                finally:
                    os.close(fd)
                log.info(
                    "waiting for lock %s held by pid %s",
                    self.path,
                    holder,
                    extra={"lock": str(self.path), "holder_pid": holder},
                )
                next_log = now + self._log_every_s
            self._sleep(self._poll_s)

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    @staticmethod
    def _write_pid(fd: int) -> None:
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError as exc:  # informational only; the flock is what counts
            log.debug("could not record pid in lock file: %s", exc)

    def __enter__(self) -> DatasetLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def try_lock(path: Path) -> DatasetLock | None:
    """The held lock, or None when another process holds it (or it cannot be created)."""
    lock = DatasetLock(path)
    try:
        return lock if lock.try_acquire() else None
    except OSError as exc:
        log.warning("cannot open lock file %s: %s", path, exc)
        return None


def is_locked_by_other(path: Path) -> bool:
    """True when another process holds the dataset's lock right now (a snapshot answer)."""
    if not path.exists():
        return False
    lock = try_lock(path)
    if lock is None:
        return True
    lock.release()
    return False
