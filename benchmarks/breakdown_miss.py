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

    python -m benchmarks.breakdown_miss [--runs 5] [--requests 1500] [--concurrency 1]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_node_cache import fill_cache, fleet_objects
from benchmarks.bench_webhook import DISTINCT_PODS, FLEET_NODES, write_serving_pair
from benchmarks.floor import load_average
from benchmarks.table import markdown_table
from benchmarks.workload import admission_review, worker_pod, write_policy_dir

__all__ = ["main"]

_ORDERS = ("before", "after")  # gc.freeze() before / after the node cache fills
_KINDS = ("plain", "split", "alloc")
_INNER = ("parse_review", "admit", "access line", "metrics")
_PARTS = (*_INNER, "handler")


class _Meter:
    """Thread-CPU time per part and gc passes, counted only while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.ns: dict[str, int] = dict.fromkeys(_PARTS, 0)
        self.gc_passes = [0, 0, 0]
        self.gc_ns = 0
        self.gc_ns_by_gen = [0, 0, 0]
        self._gc_started = 0
        self.peak_bytes = 0  # tracemalloc: the most any handler call held above its start
        self.peak_sum = 0
        self.calls = 0

    def timed(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if not self.on:
                return fn(*args, **kwargs)
            started = time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self.ns[part] += time.thread_time_ns() - started

        return call

    def timed_async(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        # The handler: for these small bodies request.read() does not wait, so the thread
        # time across it is the handler's own (checked: c=1 leaves nothing else to run).
        async def call(*args: Any) -> Any:
            if not self.on:
                return await fn(*args)
            started = time.thread_time_ns()
            tracing = tracemalloc.is_tracing()
            if tracing:
                tracemalloc.reset_peak()
                base = tracemalloc.get_traced_memory()[0]
            try:
                return await fn(*args)
            finally:
                self.ns["handler"] += time.thread_time_ns() - started
                if tracing:
                    peak = tracemalloc.get_traced_memory()[1] - base
                    self.peak_bytes = max(self.peak_bytes, peak)
                    self.peak_sum += peak
                    self.calls += 1

        return call

    def gc_callback(self, phase: str, info: dict[str, int]) -> None:
        if not self.on:
            return
        if phase == "start":
            self._gc_started = time.thread_time_ns()
            return
        spent = time.thread_time_ns() - self._gc_started
        self.gc_passes[info["generation"]] += 1
        self.gc_ns += spent
        self.gc_ns_by_gen[info["generation"]] += spent


def _serve_child(order: str) -> int:
    """A server child: 'listening URL', then per line 'start KIND' / 'stop' (a JSON line)."""
    from aiohttp import web

    import webhook.server.app as app_module
    from common.logsetup import configure_logging
    from webhook.server.app import STATE, ServerConfig, build_app, make_app

    configure_logging("info", "json")  # stderr is /dev/null: the access line is written
    meter = _Meter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _ca, cert, key = write_serving_pair(work)
        config = ServerConfig(
            policies_dir=write_policy_dir(work / "policies"),
            cert_path=cert,
            key_path=key,
            metrics_port=None,
            node_cache=True,
            claim_template_cache=True,
        )
        state = build_app(config)[STATE]
        assert state.nodes is not None and state.tls is not None
        if order == "before":
            gc.freeze()
        fill_cache(state.nodes, fleet_objects(FLEET_NODES))
        if order == "after":
            gc.freeze()
        cache = state.admitter.pods  # type: ignore[attr-defined]
        app_module.parse_review = meter.timed("parse_review", app_module.parse_review)
        app_module._log = meter.timed("access line", app_module._log)
        app_module._admit = meter.timed_async(app_module._admit)
        state.admitter.admit = meter.timed("admit", state.admitter.admit)  # type: ignore[method-assign]
        state.metrics.admission = meter.timed("metrics", state.metrics.admission)  # type: ignore[method-assign]
        gc.callbacks.append(meter.gc_callback)
        return asyncio.run(_child_loop(web, make_app(state), state.tls.listening, meter, cache))


async def _child_loop(
    web: Any, app: Any, context: ssl.SSLContext, meter: _Meter, cache: Any
) -> int:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context, backlog=1024)
    await site.start()
    print(f"listening: https://127.0.0.1:{runner.addresses[0][1]}/mutate", flush=True)
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str] = asyncio.Queue()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(lines.put_nowait, line.strip())
        loop.call_soon_threadsafe(lines.put_nowait, "")

    threading.Thread(target=read, daemon=True).start()
    start: dict[str, Any] = {}
    while line := await lines.get():
        if line.startswith("start"):
            kind = line.split()[1]
            if kind == "alloc":
                tracemalloc.start()
            meter.__init__()  # type: ignore[misc]
            meter.on = kind != "plain"
            start = {"kind": kind, "cpu": time.process_time(), "hits": cache.hits}
            start["blocks"] = sys.getallocatedblocks()
        else:
            meter.on = False
            out = {
                "cpu_ns": int((time.process_time() - start["cpu"]) * 1e9),
                "hits": cache.hits - start["hits"],
                "parts_ns": meter.ns,
                "gc_passes": meter.gc_passes,
                "gc_ns": meter.gc_ns,
                "gc_ns_by_gen": meter.gc_ns_by_gen,
                "peak_bytes": meter.peak_bytes,
                "peak_mean": meter.peak_sum / max(1, meter.calls),
                # Live blocks, all of them (tracemalloc would miss frees of older objects).
                "blocks": sys.getallocatedblocks() - start["blocks"],
            }
            if start["kind"] == "alloc":
                tracemalloc.stop()
            print(json.dumps(out), flush=True)
    await runner.cleanup()
    return 0


class _Child:
    def __init__(self, order: str) -> None:
        self.order = order
        self.next = 0  # the next body to send: every request a body not sent for a while
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.breakdown_miss", "--child", order],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        if not first.startswith("listening: "):
            raise RuntimeError(f"the {order} child did not start (exit {self.process.wait()})")
        self.url = first.split(" ", 1)[1].strip()

    def say(self, line: str) -> dict[str, Any] | None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline()) if line == "stop" else None

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


async def _send(child: _Child, bodies: list[bytes], requests: int, concurrency: int) -> None:
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


def _run(child: _Child, kind: str, bodies: list[bytes], requests: int, c: int) -> dict[str, Any]:
    child.say(f"start {kind}")
    sent = requests // c * c
    asyncio.run(_send(child, bodies, sent, c))
    result = child.say("stop")
    assert result is not None
    if result["hits"]:
        raise RuntimeError(f"{result['hits']} answer cache hits: not the miss path")
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
    ("  admit (a miss: engine, fit check, answer)", "split", lambda r: _parts(r, "admit")),
    ("  metrics", "split", lambda r: _parts(r, "metrics")),
    ("  access line (JSON, to stderr)", "split", lambda r: _parts(r, "access line")),
    (
        "  the rest (answer to JSON, web.Response)",
        "split",
        lambda r: _parts(r, "handler") - _parts(r, *_INNER),
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
            **{f"freeze {o} fill": cell(o) for o in _ORDERS},
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
        prog="python -m benchmarks.breakdown_miss", description=__doc__
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1500, help="per run")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--child", choices=_ORDERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        logging.getLogger("asyncio").setLevel(logging.ERROR)
        return _serve_child(args.child)
    bodies = [admission_review(worker_pod(gpus=4, index=i)) for i in range(DISTINCT_PODS)]
    children = {order: _Child(order) for order in _ORDERS}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {
        (o, k): [] for o in _ORDERS for k in _KINDS
    }
    try:
        for child in children.values():  # warm-up: every body once, the cache then cycles
            _run(child, "plain", bodies, len(bodies), args.concurrency)
        for i in range(args.runs):
            for kind in _KINDS:
                for order in _ORDERS if i % 2 == 0 else reversed(_ORDERS):
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
    print(
        f"\nServer breakdown on the miss path, c={args.concurrency}, {args.runs} interleaved "
        f"runs of {args.requests} requests each, {FLEET_NODES} nodes in the cache. "
        "Taken on a shared, loaded machine: not final.\n"
    )
    print(markdown_table(_table(runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
