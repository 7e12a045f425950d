"""Webhook server vs its floor: the same wrk load over TLS against `topoplace-webhook serve`
and a bare aiohttp TLS server answering a constant allow, side by side in one run.

Ours runs as manifests/base/webhook/deployment.yaml runs it: `--node-cache
--claim-template-cache --log-format=json` (access log on), its caches filled from a
stand-in API server (apiserver_stub.py) holding the example fleet, so every mutated pod
also gets the fit check's verdict.

Three kinds of load: one mutated pod shape (the answer cache serves a Job's alike pods), "every
pod different" (DISTINCT_PODS pods in turn, each with its own completion index in its env,
more than the answer cache keeps: each is admitted afresh, the engine replaying its form's
answer, webhook/engine/replay), and pods that did not opt in.

Beside the mutated rows, the honest floor of issue 47: the bare webhook, which parses each
review and answers with our patch, fixed (servers.start_bare). Levels are interleaved (bare,
ours, bare webhook, bare…) so machine noise hits all alike; each figure is the median of
`runs` runs. CPU per request comes from the server process's /proc counters.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.procs import Server, peak_rss_mb, rss_mb, start_server
from benchmarks.webhook.servers import (
    ask,
    await_fit_verdict,
    check_answer,
    measure,
    patch_bytes,
    start_bare,
    start_ours,
    write_serving_pair,
)
from benchmarks.webhook.workload import admission_review, worker_pod, write_policy_dir

__all__ = ["DISTINCT_PODS", "FLEET_NODES", "LEVELS", "run_webhook_bench"]

LEVELS = (1, 16, 64, 256)
DISTINCT_PODS = 4096  # more than the answer cache keeps (answer_cache.DEFAULT_MAX_ENTRIES)
_DISTINCT_LEVELS = (1, 16)
_TARGETS = {"mutated": 0.8, "mutated, every pod different": 0.6, "pass-through": 0.9}
FLEET_NODES = 60  # the example fleet's machine classes, cloned
_REPO = Path(__file__).resolve().parents[2]


def _body_file(kind: str) -> str:
    return kind.replace(", ", "-").replace(" ", "-") + ".jsonl"


def _median(samples: list[dict[str, float]], key: str) -> float:
    return statistics.median(s[key] for s in samples)


def _spread(samples: list[dict[str, float]]) -> float:
    values = [s["rps"] for s in samples]
    return (max(values) - min(values)) / statistics.median(values)


def _latency(samples: list[dict[str, float]]) -> str:
    return f"{_median(samples, 'p50_ms'):.2f} / {_median(samples, 'p99_ms'):.2f}"


def _row(kind: str, level: int, samples: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    bare, ours, floor = samples["bare"], samples["ours"], samples.get("bare-webhook")
    ratio = _median(ours, "rps") / _median(bare, "rps")
    target = _TARGETS[kind]
    p99_ratio = _median(ours, "p99_ms") / _median(bare, "p99_ms")
    met = ratio >= target and (level != 1 or p99_ratio <= 1.5)
    return {
        "pods": kind,
        "concurrency": level,
        "bare req/s": _median(bare, "rps"),
        "topoplace req/s": _median(ours, "rps"),
        "ratio": ratio,
        "bare p50/p99 ms": _latency(bare),
        "topoplace p50/p99 ms": _latency(ours),
        "p99 ÷ bare": p99_ratio,
        "bare CPU µs/req": _median(bare, "cpu_us"),
        "topoplace CPU µs/req": _median(ours, "cpu_us"),
        "spread (ours)": f"{_spread(ours):.0%}",
        "target": f"ratio ≥ {target:.0%}" + (", p99 ≤ 1.5× bare" if level == 1 else ""),
        "met": "yes" if met else "NO",
        # The honest floor (issue 47): a webhook that parses the review and writes our patch.
        "bare webhook req/s": _median(floor, "rps") if floor else "",
        "÷ bare webhook": _median(ours, "rps") / _median(floor, "rps") if floor else "",
        "bare webhook CPU µs/req": _median(floor, "cpu_us") if floor else "",
    }


def run_webhook_bench(*, runs: int = 5, seconds: float = 2.0) -> dict[str, list[dict[str, Any]]]:
    if shutil.which("wrk") is None:
        raise RuntimeError("wrk not found: `apt-get install wrk` (make bench does this)")
    work = Path(tempfile.mkdtemp(prefix="topoplace-bench-"))
    _ca, cert, key = write_serving_pair(work)
    write_policy_dir(work / "policies")
    bodies = {
        # 4 GPUs: the bench policy's 8-GPU pod fits no node of the example fleet (its
        # kubelet-shape terms leave out the DGX H100s, whose restricted kubelets refuse it).
        "mutated": [admission_review(worker_pod(gpus=4))],
        "mutated, every pod different": [
            admission_review(worker_pod(gpus=4, index=i)) for i in range(DISTINCT_PODS)
        ],
        "pass-through": [admission_review(worker_pod(opted_in=False))],
    }
    for kind, kind_bodies in bodies.items():
        # loadgen.lua sends the lines in turn: one JSON document per line.
        (work / _body_file(kind)).write_bytes(b"\n".join(kind_bodies) + b"\n")
    env = {**os.environ, "PYTHONPATH": str(_REPO)}
    tls = ["--tls-cert", str(cert), "--tls-key", str(key)]
    api = start_server(
        "apiserver",
        [
            sys.executable,
            "-m",
            "benchmarks.webhook.apiserver_stub",
            "--nodes",
            str(FLEET_NODES),
            "--dir",
            str(work),
        ],
        log=work / "apiserver.log",
        env=env,
    )
    try:
        return _run(
            work, bodies, tls, env, api_kubeconfig=work / "kubeconfig", runs=runs, seconds=seconds
        )
    finally:
        api.stop()


def _memory_rows(started_rss: float | None, ours: Server, bare: Server) -> list[dict[str, Any]]:
    return [
        {
            "process": f"topoplace-webhook serve (after start, caches filled, {FLEET_NODES} nodes)",
            "RSS MB": started_rss,
            "target": "≤ 100 MB",
        },
        {
            "process": "topoplace-webhook serve (after load)",
            "peak RSS MB": peak_rss_mb(ours.process.pid),
            "target": "",
        },
        {
            "process": "bare aiohttp TLS server (after load)",
            "peak RSS MB": peak_rss_mb(bare.process.pid),
            "target": "",
        },
    ]


def _run(
    work: Path,
    bodies: dict[str, list[bytes]],
    tls: list[str],
    env: dict[str, str],
    *,
    api_kubeconfig: Path,
    runs: int,
    seconds: float,
) -> dict[str, list[dict[str, Any]]]:
    ours = start_ours(work, tls, env, api_kubeconfig=api_kubeconfig)
    bare = start_bare(work, tls, env)
    floor: Server | None = None
    rows: list[dict[str, Any]] = []
    started_rss: float | None = None
    try:
        for kind, kind_bodies in bodies.items():
            mutated = kind.startswith("mutated")
            body = kind_bodies[0]
            check_answer(ours, body, work / "ca.crt", expect_patch=mutated)
            if mutated:
                await_fit_verdict(ours, body, work / "ca.crt")
                if started_rss is None:  # caches filled, nothing under load yet
                    started_rss = rss_mb(ours.process.pid)
                if floor is None:  # our patch, the same for every pod of these rows
                    patch = patch_bytes(ask(ours, body, work / "ca.crt"))
                    floor = start_bare(work, tls, env, patch_of=patch)
            check_answer(bare, body, work / "ca.crt", expect_patch=False)
            servers = {"bare": bare, "ours": ours}
            if mutated and floor is not None:
                servers["bare-webhook"] = floor
            for level in LEVELS if len(kind_bodies) == 1 else _DISTINCT_LEVELS:
                samples: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
                for _ in range(runs):
                    for name, server in servers.items():
                        samples[name].append(
                            measure(
                                server, work / _body_file(kind), connections=level, seconds=seconds
                            )
                        )
                rows.append(_row(kind, level, samples))
        memory = _memory_rows(started_rss, ours, bare)
    finally:
        ours_rc = ours.stop()
        bare.stop()
        if floor is not None:
            floor.stop()
    if ours_rc != 0:
        raise RuntimeError(f"serve exited {ours_rc} on SIGTERM; log: {work / 'serve.log'}")
    shutil.rmtree(work, ignore_errors=True)
    return {"webhook": rows, "memory": memory}


if __name__ == "__main__":
    from benchmarks.table import markdown_table

    result = run_webhook_bench()
    for section, section_rows in result.items():
        print(f"## {section}\n\n{markdown_table(section_rows)}")
