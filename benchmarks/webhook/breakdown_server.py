"""The servers of breakdown_miss.py: ours in a child process, the app `serve` builds, its node
cache filled, gc.freeze() before or after the fill, timers around the handler's parts and
gc.callbacks counting only while a run is on; and `Bare`, the bare aiohttp webhook beside it.

    python -m benchmarks.webhook.breakdown_server before|after [NODES]
    # then lines on stdin: 'start KIND', 'stop', 'collect'
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import ssl
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.procs import cpu_seconds, start_server
from benchmarks.webhook.bench_node_cache import fill_cache, fleet_objects
from benchmarks.webhook.bench_webhook import FLEET_NODES
from benchmarks.webhook.profile_miss import serve_config
from benchmarks.webhook.servers import write_serving_pair
from benchmarks.webhook.workload import worker_pod, write_policy_dir
from webhook import jsonio
from webhook.engine.recipe import mutate
from webhook.policy.loader import load_policy_dir

__all__ = ["INNER", "ORDERS", "Bare", "main"]

_REPO = Path(__file__).resolve().parents[2]

ORDERS = ("before", "after")  # gc.freeze() before / after the node cache fills
INNER = ("parse_review", "admit", "access line", "metrics")
_PARTS = (*INNER, "handler")


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


def _serve_child(order: str, nodes: int) -> int:
    """A server child: 'listening URL', then per line 'start KIND' / 'stop' (a JSON line)."""
    from aiohttp import web

    import webhook.server.app as app_module
    from common.logsetup import configure_logging
    from webhook.server.app import STATE, build_app, make_app

    configure_logging("info", "json")  # stderr is /dev/null: the access line is written
    meter = _Meter()
    with tempfile.TemporaryDirectory() as tmp:
        state = build_app(serve_config(Path(tmp)))[STATE]
        assert state.nodes is not None and state.tls is not None
        if order == "before":
            gc.freeze()
        fill_cache(state.nodes, fleet_objects(nodes))
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
        if line == "collect":  # one full collection: what the freeze order changes most
            started = time.thread_time_ns()
            gc.collect()
            print(json.dumps({"collect_us": (time.thread_time_ns() - started) / 1e3}), flush=True)
        elif line.startswith("start"):
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


class Bare:
    """The bare aiohttp webhook (bare_server.py --patch-file, our patch for the first pod):
    its whole request, from /proc, for the row "outside the handler" to stand beside."""

    order = "bare"

    def __init__(self, work: Path) -> None:
        _ca, cert, key = write_serving_pair(work)
        policies = load_policy_dir(write_policy_dir(work / "policies"))
        patch = mutate(worker_pod(gpus=4), "ml-bench", policies).patch
        (work / "patch.json").write_bytes(jsonio.dumps(patch))
        self.next = 0
        tls = ["--tls-cert", str(cert), "--tls-key", str(key)]
        self.server = start_server(
            "bare",
            [
                sys.executable,
                "-m",
                "benchmarks.peers.bare_server",
                *tls,
                "--patch-file",
                str(work / "patch.json"),
            ],
            log=work / "bare.log",
            env={**os.environ, "PYTHONPATH": str(_REPO)},
        )
        self.url = self.server.url
        self._cpu = 0.0

    def say(self, line: str) -> dict[str, Any] | None:
        if line != "stop":
            self._cpu = cpu_seconds(self.server.process.pid)
            return None
        return {"cpu_ns": (cpu_seconds(self.server.process.pid) - self._cpu) * 1e9, "hits": 0}

    def close(self) -> None:
        self.server.stop()


def main() -> int:
    order = sys.argv[1] if len(sys.argv) in (2, 3) else ""
    nodes = sys.argv[2] if len(sys.argv) == 3 else str(FLEET_NODES)
    if order not in ORDERS or not nodes.isdigit():
        usage = f"python -m benchmarks.webhook.breakdown_server {'|'.join(ORDERS)} [NODES]"
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    return _serve_child(order, int(nodes))


if __name__ == "__main__":
    raise SystemExit(main())
