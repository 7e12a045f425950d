"""Bounded work for any input (issue 43), measured: the extreme pods' answer time and patch
size, the alias-bomb policy's `validate` time, and a seeded admission fuzz through the real
HTTPS server with the shipped policies: ordinary pods' p99 with and without extreme pods
interleaved (rounds alternating), and the process's peak RSS against its RSS after start.

The fuzz's extreme pods come from tests/webhook/server/test_bounded_admission.py's generator,
so the bench and the test in `make test` send the same kinds of pod.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import trustme

from tests.webhook.server.conftest import TlsFiles, admission_review, server_config, write_leaf
from tests.webhook.server.test_bounded_admission import SHIPPED, extreme_pod, inference_pod
from webhook.server.runner import WebhookServer

__all__ = ["run_bounded_bench"]

GPU = "nvidia.com/gpu"
ROUNDS = 6
ORDINARY = 200  # per round
EXTREME = 200  # per mixed round


def _rss(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    return 0


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def _post(client: aiohttp.ClientSession, url: str, pod: dict[str, Any]) -> tuple[float, int]:
    started = time.perf_counter()
    async with client.post(url, json=admission_review(pod)) as resp:
        body = await resp.read()
    return (time.perf_counter() - started) * 1000, len(body)


async def _fuzz(tmp: Path) -> list[dict[str, Any]]:
    ca = trustme.CA()
    tls = TlsFiles(ca, tmp / "tls.crt", tmp / "tls.key")
    write_leaf(ca.issue_cert("localhost", "127.0.0.1"), tls.cert, tls.key)
    policies = tmp / "policies"
    shutil.copytree(SHIPPED, policies)
    ctx = tls.client_context()
    rows: list[dict[str, Any]] = []
    async with WebhookServer(server_config(policies, tls)) as server:
        connector = aiohttp.TCPConnector(ssl=ctx, limit=16)
        async with aiohttp.ClientSession(connector=connector) as client:
            ordinary = inference_pod(**{GPU: "2"})
            for pod, name in (
                (inference_pod(**{GPU: "1e30"}), '`nvidia.com/gpu: "1e30"`'),
                (inference_pod(**{GPU: "1000000"}), '`nvidia.com/gpu: "1000000"`'),
            ):
                times = [await _post(client, server.url, pod) for _ in range(20)]
                rows.append({"case": name, "answer ms (median)": round(statistics.median(
                    t for t, _ in times), 2), "answer bytes": times[0][1]})  # fmt: skip
            await asyncio.gather(*(_post(client, server.url, ordinary) for _ in range(50)))
            started_rss = _rss("VmRSS:")
            rng = random.Random(43)
            alone: list[float] = []
            mixed: list[float] = []
            for round_ in range(ROUNDS):
                pods = [(ordinary, True)] * ORDINARY
                if round_ % 2:
                    pods += [(extreme_pod(rng), False) for _ in range(EXTREME)]
                    rng.shuffle(pods)
                answers = await asyncio.gather(*(_post(client, server.url, p) for p, _ in pods))
                took = [t for (_, keep), (t, _) in zip(pods, answers, strict=True) if keep]
                (mixed if round_ % 2 else alone).extend(took)
            peak = _rss("VmHWM:")
    rows.append({
        "case": f"ordinary pods' p99, alone / beside {EXTREME} extreme pods a round (c=16)",
        "answer ms (median)": f"{_p99(alone):.2f} / {_p99(mixed):.2f} "
                              f"({_p99(mixed) / _p99(alone):.2f}×)",
        "answer bytes": f"RSS {started_rss / 2**20:.0f} MiB after start, peak {peak / 2**20:.0f} "
                        f"MiB ({peak / started_rss:.2f}×)",
    })  # fmt: skip
    return rows


def _alias_bomb(tmp: Path) -> dict[str, Any]:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        levels.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    directory = tmp / "bomb"
    directory.mkdir()
    (directory / "p.yaml").write_text("\n".join(levels) + "\n")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "webhook", "validate", str(directory)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    took = (time.perf_counter() - started) * 1000
    line = (done.stderr.strip().splitlines() or [""])[0][-90:]
    case = "alias-bomb policy, 9 levels: `validate` (whole process)"
    return {"case": case, "answer ms (median)": round(took),
            "answer bytes": f"exit {done.returncode}: …{line}"}  # fmt: skip


def run_bounded_bench() -> list[dict[str, Any]]:
    load = Path("/proc/loadavg").read_text().split()[0]
    with tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(_fuzz(Path(tmp)))
        rows.append(_alias_bomb(Path(tmp)))
    for row in rows:
        row["load avg"] = load
    return rows
