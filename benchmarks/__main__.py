"""`make bench`: run every benchmark, print one report, write benchmarks/results.md.

`python -m benchmarks --only engine,webhook` runs a subset.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.table import markdown_table

Rows = list[dict[str, Any]]
# section key -> (title, module, function); a function returns rows or {sub-section: rows}
SECTIONS: dict[str, tuple[str, str, str]] = {
    "webhook": (
        "Webhook server vs bare aiohttp TLS floor (wrk, loopback)",
        "benchmarks.webhook.bench_webhook",
        "run_webhook_bench",
    ),
    "engine": ("Mutation engine scaling", "benchmarks.webhook.bench_engine", "run_engine_bench"),
    "nodecache": (
        "No-fit admission check at 5,000 nodes: node cache on vs off",
        "benchmarks.webhook.bench_node_cache",
        "run_node_cache_bench",
    ),
    "discovery": ("Agent discovery", "benchmarks.agent.bench_discovery", "run_discovery_bench"),
    "locality": (
        "Measured locality per audit, 110 pods (fixtures)",
        "benchmarks.agent.bench_locality",
        "run_locality_bench",
    ),
    "sync": ("Agent label sync", "benchmarks.agent.bench_agent_sync", "run_sync_bench"),
    "prefetch": (
        "Dataset prefetch throughput",
        "benchmarks.agent.bench_prefetch",
        "run_prefetch_bench",
    ),
    "prefetch-peers": (
        "Prefetch next to the fastest S3 copiers (versitygw on loopback, cold cache each run)",
        "benchmarks.agent.bench_prefetch_peers",
        "run_prefetch_peers_bench",
    ),
    "memory": ("Memory", "benchmarks.bench_memory", "run_memory_bench"),
    "bounded": (
        "Bounded work for any input: extreme pods, the alias bomb, an admission fuzz",
        "benchmarks.webhook.bench_bounded",
        "run_bounded_bench",
    ),
    # Not in the default run: it needs the real control plane (make bench-e2e).
    "e2e": (
        "Pod create through the real kube-apiserver: our webhook next to its peers",
        "benchmarks.e2e.bench_e2e",
        "run_e2e_bench",
    ),
    "e2e-datasets": (
        "Pod create to worker start with a dataset, on the real kubelets: cold and cached",
        "benchmarks.e2e.bench_e2e_datasets",
        "run_e2e_datasets_bench",
    ),
    "e2e-nrt": (
        "Free capacity per NUMA node on the real kubelets: NodeResourceTopology freshness",
        "benchmarks.e2e.bench_e2e_nrt",
        "run_e2e_nrt_bench",
    ),
    "e2e-across": (
        "A 4-pod job, create to all Running on the real kubelets: kept together or not",
        "benchmarks.e2e.bench_e2e_across",
        "run_e2e_across_bench",
    ),
    "e2e-burst": (
        "A burst of 100 pods for the NUMA-aware scheduler: with and without its accounting",
        "benchmarks.e2e.bench_e2e_burst",
        "run_e2e_burst_bench",
    ),
}
NOT_BY_DEFAULT = {"e2e", "e2e-datasets", "e2e-nrt", "e2e-across", "e2e-burst"}


def _machine() -> str:
    model = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC · commit {commit} · {model} · "
        f"{os.cpu_count()} cores · {mem_gib:.0f} GiB · {platform.system()} "
        f"{platform.release()} · Python {platform.python_version()}"
    )


def _run(key: str) -> dict[str, Rows]:
    _title, module, function = SECTIONS[key]
    fn: Callable[[], Rows | dict[str, Rows]] = getattr(importlib.import_module(module), function)
    result = fn()
    return result if isinstance(result, dict) else {key: result}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--only", help="comma-separated sections: " + ",".join(SECTIONS))
    parser.add_argument("--output", type=Path, default=Path(__file__).with_name("results.md"))
    args = parser.parse_args()
    keys = args.only.split(",") if args.only else [k for k in SECTIONS if k not in NOT_BY_DEFAULT]
    unknown = [k for k in keys if k not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {unknown}; choose from {list(SECTIONS)}")

    collected: dict[str, Rows] = {}
    for key in keys:
        started = time.monotonic()
        print(f"… {SECTIONS[key][0]}", file=sys.stderr, flush=True)
        for sub, rows in _run(key).items():
            collected.setdefault(sub, []).extend(rows)
        print(f"  done in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)

    titles = {k: t for k, (t, _, _) in SECTIONS.items()}
    report = [f"# Topoplace benchmarks\n\n{_machine()}\n"]
    report += ["Each figure is the median of several runs; 'spread' is (max − min) / median.\n"]
    for sub, rows in collected.items():
        report.append(f"## {titles.get(sub, sub)}\n\n{markdown_table(rows)}")
    text = "\n".join(report)
    print(text)
    args.output.write_text(text)
    print(f"written to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
