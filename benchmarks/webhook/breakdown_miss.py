"""Where a request on the miss path goes in the server (issue 47 item 3): the process's CPU
per request split into the handler's parts (parse, admit, the access line, metrics), what
is outside the handler (TLS, HTTP parsing, the event loop, aiohttp writing the response),
garbage-collector passes and their time (gc.callbacks), and allocations (tracemalloc).

Each server is the app `serve --node-cache --claim-template-cache --log-format=json` builds
(its access log written to /dev/null), in a child process, its node cache filled with
bench_webhook's fleet, answering over TLS on loopback; this process is the client, sending
bench_webhook's DISTINCT_PODS pods in turn (every request a miss: the child checks). Two
children differ only in when gc.freeze() runs: before the node cache fills (as `serve` did
until issue 47) or after. Runs alternate between them and between three kinds (plain: the
total; split: timers on; alloc: tracemalloc on), and each figure is the median over runs.

    python -m benchmarks.webhook.breakdown_miss [--runs 5] [--requests 1500] [--concurrency 1] \
        [--nodes 60]
    python -m benchmarks.webhook.breakdown_miss --pods one   # the hit path, for the difference
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.peers.floor import load_average
from benchmarks.table import markdown_table
from benchmarks.webhook.bench_webhook import DISTINCT_PODS, FLEET_NODES
from benchmarks.webhook.breakdown_server import INNER, ORDERS, Bare
from benchmarks.webhook.workload import admission_review, worker_pod

__all__ = ["main"]

_REPO = Path(__file__).resolve().parents[2]

_KINDS = ("plain", "split", "alloc")  # timers off; timers and gc counts on; tracemalloc on


class _Child:
    def __init__(self, order: str, nodes: int) -> None:
        self.order = order
        self.next = 0  # the next body to send: every request a body not sent for a while
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.webhook.breakdown_server", order, str(nodes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONPATH": str(_REPO)},
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        if not first.startswith("listening: "):
            raise RuntimeError(f"the {order} child did not start (exit {self.process.wait()})")
        self.url = first.split(" ", 1)[1].strip()

    def say(self, line: str) -> dict[str, Any] | None:
        """'start KIND' (no answer), 'stop' or 'collect' (a JSON answer)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        answers = not line.startswith("start")
        return json.loads(self.process.stdout.readline()) if answers else None

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


async def _send(child: _Child | Bare, bodies: list[bytes], requests: int, concurrency: int) -> None:
    import aiohttp

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the child's fresh CA; loopback only
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=context)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(count: int) -> None:
            for _ in range(count):
                body = bodies[child.next % len(bodies)]
                child.next += 1
                async with session.post(child.url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{child.order}: HTTP {response.status}")

        share = [requests // concurrency] * concurrency
        await asyncio.gather(*(worker(n) for n in share))


def _run(
    child: _Child | Bare, kind: str, bodies: list[bytes], requests: int, c: int
) -> dict[str, Any]:
    child.say(f"start {kind}")
    sent = requests // c * c
    asyncio.run(_send(child, bodies, sent, c))
    result = child.say("stop")
    assert result is not None
    # Every pod different: no hit at all; one pod: every request after the first a hit.
    if isinstance(child, _Child) and result["hits"] not in (
        (0,) if len(bodies) > 1 else (sent, sent - 1)
    ):
        raise RuntimeError(f"{result['hits']} answer cache hits of {sent}: not the path asked for")
    return {**result, "requests": sent, "load": os.getloadavg()[0]}


_Value = Callable[[dict[str, Any]], float]


def _parts(r: dict[str, Any], *names: str) -> float:
    return float(sum(r["parts_ns"][n] for n in names))


# (row, kind of run, value per run; per request and in µs unless the row says otherwise)
_ROWS: tuple[tuple[str, str, _Value], ...] = (
    ("process CPU, no timers (plain runs)", "plain", lambda r: r["cpu_ns"]),
    ("process CPU, timers on (split runs)", "split", lambda r: r["cpu_ns"]),
    (
        "outside the handler: TLS, HTTP parsing, event loop, aiohttp's write",
        "split",
        lambda r: r["cpu_ns"] - _parts(r, "handler"),
    ),
    ("handler, all of it", "split", lambda r: _parts(r, "handler")),
    ("  parse_review (msgspec head)", "split", lambda r: _parts(r, "parse_review")),
    (
        "  admit (engine and fit check on a miss; a hit: the cache)",
        "split",
        lambda r: _parts(r, "admit"),
    ),
    ("  metrics", "split", lambda r: _parts(r, "metrics")),
    ("  access line (JSON, to stderr)", "split", lambda r: _parts(r, "access line")),
    (
        "  the rest (answer to JSON, web.Response)",
        "split",
        lambda r: _parts(r, "handler") - _parts(r, *INNER),
    ),
    ("garbage collector, all passes (inside the rows above)", "split", lambda r: r["gc_ns"]),
)


def _median_per_request(runs: list[dict[str, Any]], value: _Value, scale: float) -> float:
    return statistics.median(value(r) / r["requests"] * scale for r in runs)


def _passes(runs: list[dict[str, Any]], gen: int) -> float:
    return _median_per_request(runs, lambda r: r["gc_passes"][gen], 1e3)


def _gen2_pass_us(runs: list[dict[str, Any]]) -> str:
    passes = sum(r["gc_passes"][2] for r in runs)
    return f"{sum(r['gc_ns_by_gen'][2] for r in runs) / passes / 1e3:.0f}" if passes else "none"


def _table(runs: dict[tuple[str, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    def row(name: str, cell: Callable[[str], str]) -> dict[str, Any]:
        return {
            "per request (medians of runs)": name,
            **{f"freeze {o} fill": cell(o) for o in ORDERS},
        }

    out = [
        row(
            f"{name}, CPU µs",
            lambda o, k=kind, v=value: f"{_median_per_request(runs[(o, k)], v, 1e-3):.1f}",
        )
        for name, kind, value in _ROWS
    ]
    for gen in range(3):
        out.append(
            row(
                f"gc gen{gen} passes per 1,000 requests",
                lambda o, g=gen: f"{_passes(runs[(o, 'split')], g):.1f}",
            )
        )
    out.append(row("CPU µs per gen2 pass (all runs)", lambda o: _gen2_pass_us(runs[(o, "split")])))
    out.append(
        row(
            "tracemalloc: most held in one handler call, KiB (mean / max)",
            lambda o: (
                f"{statistics.median(r['peak_mean'] for r in runs[(o, 'alloc')]) / 1024:.0f} / "
                f"{max(r['peak_bytes'] for r in runs[(o, 'alloc')]) / 1024:.0f}"
            ),
        )
    )
    out.append(
        row(
            "live memory blocks added per request (sys.getallocatedblocks)",
            lambda o: f"{_median_per_request(runs[(o, 'split')], lambda r: r['blocks'], 1):.1f}",
        )
    )
    loads = [r["load"] for rs in runs.values() for r in rs]
    spread = f"{min(loads):.1f} / {statistics.median(loads):.1f} / {max(loads):.1f}"
    out.append(row("machine load (1 min) over the runs: min / median / max", lambda _o: spread))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.webhook.breakdown_miss", description=__doc__
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1500, help="per run")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=FLEET_NODES, help="in the node cache")
    parser.add_argument(
        "--pods",
        choices=("different", "one"),
        default="different",
        help="every pod different (the miss path), or one pod (the answer cache's hit path)",
    )
    args = parser.parse_args()
    count = DISTINCT_PODS if args.pods == "different" else 1
    bodies = [admission_review(worker_pod(gpus=4, index=i)) for i in range(count)]
    children = {order: _Child(order, args.nodes) for order in ORDERS}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {(o, k): [] for o in ORDERS for k in _KINDS}
    bare_runs: list[dict[str, Any]] = []
    collects: dict[str, list[float]] = {order: [] for order in ORDERS}
    work = tempfile.TemporaryDirectory()
    bare = Bare(Path(work.name))
    try:
        for child in children.values():  # warm-up: every body once, the cache then cycles
            _run(child, "plain", bodies, len(bodies), args.concurrency)
        _run(bare, "plain", bodies, args.requests, args.concurrency)
        for i in range(args.runs):
            bare_runs.append(_run(bare, "plain", bodies, args.requests, args.concurrency))
            for order, child in children.items():
                collected = child.say("collect")
                assert collected is not None
                collects[order].append(collected["collect_us"])
            for kind in _KINDS:
                for order in ORDERS if i % 2 == 0 else reversed(ORDERS):
                    run = _run(children[order], kind, bodies, args.requests, args.concurrency)
                    runs[(order, kind)].append(run)
                    cpu = run["cpu_ns"] / run["requests"] / 1e3
                    print(
                        f"  run {i + 1} {kind:5} freeze {order:6}: {cpu:6.1f} CPU µs/request  "
                        f"({load_average()})",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        for child in children.values():
            child.close()
        bare.close()
        work.cleanup()
    print(
        f"\nServer breakdown on the {'miss' if count > 1 else 'hit'} path, "
        f"c={args.concurrency}, {args.runs} interleaved "
        f"runs of {args.requests} requests each, {args.nodes} nodes in the cache. "
        "Taken on a shared, loaded machine: not final.\n"
    )
    table = _table(runs)
    table.insert(
        -1,
        {
            "per request (medians of runs)": "one full collection, gc.collect(), CPU µs (median)",
            **{f"freeze {o} fill": f"{statistics.median(collects[o]):.0f}" for o in ORDERS},
        },
    )
    print(markdown_table(table))
    whole = _median_per_request(bare_runs, lambda r: r["cpu_ns"], 1e-3)
    print(
        f"\nBeside it, the bare aiohttp webhook (orjson parse, our patch written; "
        f"bare_server.py --patch-file), its whole request: {whole:.1f} CPU µs (median of "
        f"{len(bare_runs)} runs interleaved with the above)."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
