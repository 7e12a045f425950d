"""Processes of the local cluster: started detached with a log file and a pid file each,
stopped by pid, and waited on by condition (never by sleeping a fixed time)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "ProcessDied",
    "alive",
    "free_port",
    "inotify_instances",
    "log_tail",
    "pid_file",
    "run_once",
    "running",
    "start",
    "stop",
    "stop_all",
    "wait_for",
]

T = TypeVar("T")


class ProcessDied(RuntimeError):
    """A process the cluster needs exited; the message holds the tail of its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pid_file(state: Path, name: str) -> Path:
    """Where the pid of the process `name` is kept (its kubelet's, for a node's runtime)."""
    return state / "pids" / f"{name}.pid"


def log_path(state: Path, name: str) -> Path:
    return state / "logs" / f"{name}.log"


def log_tail(state: Path, name: str, lines: int = 40) -> str:
    path = log_path(state, name)
    if not path.exists():
        return f"(no log at {path})"
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return f"--- last {len(text)} lines of {path} ---\n" + "\n".join(text)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by us) is not alive.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


@contextlib.contextmanager
def _logged(
    state: Path, name: str, argv: Sequence[str], env: Mapping[str, str] | None
) -> Iterator[dict[str, Any]]:
    """The keyword arguments for running `argv` with its output appended to logs/<name>.log."""
    log = log_path(state, name)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(argv)}\n".encode())
        out.flush()
        yield {
            "stdin": subprocess.DEVNULL,
            "stdout": out,
            "stderr": subprocess.STDOUT,
            "env": {**os.environ, **(env or {})},
        }


def start(
    state: Path,
    name: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start `argv` in its own session (it outlives `make cluster`), log to logs/<name>.log."""
    pid_file(state, name).parent.mkdir(parents=True, exist_ok=True)
    with _logged(state, name, argv, env) as io:
        proc = subprocess.Popen(list(argv), cwd=cwd, start_new_session=True, **io)
    pid_file(state, name).write_text(f"{proc.pid}\n")
    return proc.pid


def run_once(
    state: Path,
    name: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 60,
) -> int:
    """Run `argv` to completion (an init container), logging to logs/<name>.log."""
    with _logged(state, name, argv, env) as io:
        return subprocess.run(list(argv), cwd=cwd, timeout=timeout, check=False, **io).returncode


def running(state: Path) -> dict[str, int]:
    """name → pid of every recorded process that is still alive."""
    out: dict[str, int] = {}
    for pid_file in sorted((state / "pids").glob("*.pid")):
        with contextlib.suppress(ValueError, OSError):
            pid = int(pid_file.read_text())
            if alive(pid):
                out[pid_file.stem] = pid
    return out


def check_alive(state: Path, name: str) -> None:
    path = pid_file(state, name)
    if not path.exists() or not alive(int(path.read_text())):
        raise ProcessDied(f"{name} is not running\n{log_tail(state, name)}")


def stop(state: Path, name: str, *, timeout: float = 15.0) -> None:
    """SIGTERM the process group, SIGKILL what is left after `timeout`; forget the pid."""
    path = pid_file(state, name)
    if not path.exists():
        return
    pid = int(path.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it when we are its parent
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    path.unlink()


def stop_all(state: Path, order: Sequence[str] = ()) -> list[str]:
    """Stop `order` first (our processes before the control plane), then everything else."""
    names = [p.stem for p in sorted((state / "pids").glob("*.pid"))]
    ordered = [n for n in order if n in names] + [n for n in names if n not in order]
    for name in ordered:
        stop(state, name)
    return ordered


def wait_for(
    condition: Callable[[], T | None],
    what: str,
    *,
    timeout: float = 60.0,
    interval: float = 0.1,
    watch: Callable[[], None] | None = None,
) -> T:
    """Poll `condition` until it returns something truthy; TimeoutError naming `what`.

    `watch` runs each round and raises when something the wait depends on died, so a crash
    is reported at once with its log instead of as a time-out.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        if watch is not None:
            watch()
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # the condition may fail until the thing is up
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


def inotify_instances() -> tuple[int, int | None]:
    """(in use by this user's processes, the per-user limit): each kubelet holds about six
    and each agent two, and fs.inotify.max_user_instances is often 128."""
    uid = os.getuid()
    used = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if proc.stat().st_uid != uid:
                continue
            used += sum(
                1 for fd in (proc / "fd").iterdir() if os.readlink(fd) == "anon_inode:inotify"
            )
        except OSError:  # gone meanwhile, or not ours to read
            continue
    try:
        limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    except (OSError, ValueError):
        limit = None
    return used, limit
