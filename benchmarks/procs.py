"""Process helpers for benchmarks: start a server that prints `listening: URL`, read its CPU
time and peak RSS from /proc, stop it with SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Server", "cpu_seconds", "peak_rss_mb", "rss_mb", "start_server"]

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Server:
    name: str
    process: subprocess.Popen[str]
    url: str

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def start_server(
    name: str, argv: Sequence[str], *, log: Path, env: dict[str, str] | None = None
) -> Server:
    """Start `argv`, wait for its `listening: URL` line on stdout (30 s at most)."""
    process = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        env=env,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if line.startswith("listening:"):
            return Server(name, process, line.split(None, 1)[1].strip())
    process.kill()
    raise RuntimeError(f"{name} did not start; see {log}:\n{log.read_text()[-2000:]}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb(pid: int) -> float:
    return _status_mb(pid, "VmHWM:")


def rss_mb(pid: int) -> float:
    return _status_mb(pid, "VmRSS:")
