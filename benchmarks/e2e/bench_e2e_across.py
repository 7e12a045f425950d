"""A 4-pod job from create to every pod Running on the real kubelets, kept together by a
required keepTogether policy or not, on the across-nodes fleet (tests/e2e/across_fleet.py:
8 workstations in 2 blocks x 2 sub-blocks, added for the run and removed after).

Both jobs ask for nodes with a known block (the default nodes have GPUs too), 1 GPU a pod;
the one with the policy becomes Guaranteed (2 CPUs, 1 GiB a GPU) and gets pod affinity to its
own pods over network-tier-2, or, on a cluster with Kubernetes' Workload API and gates on
(TOPOPLACE_E2E_WORKLOAD_SCHEDULING=1), a gang PodGroup on it; there a third job, the same
affinity written by hand, runs in the same rounds for comparison. Rounds alternate the order,
so drift on this noisy machine hits all alike; each job is deleted, and its pods gone,
before the next. Timed from the create call to the poll that sees all 4 Running (every
0.1 s). Uses a running `make cluster`, or starts one.
"""

from __future__ import annotations

import json
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.e2e.bench_e2e import running_cluster
from e2e import procs
from e2e.kube import Kubectl
from tests.e2e.across_fleet import BLOCKS, POLICY, across_fleet, affinity_job, job

__all__ = ["run_e2e_across_bench"]

PODS = 4
ROUNDS = 5  # per variant


def _running(k: Kubectl, namespace: str, app: str) -> list[dict[str, Any]]:
    items = k.json("get", "pods", "-n", namespace, "-l", f"app={app}")["items"]
    return [p for p in items if (p.get("status") or {}).get("phase") == "Running"]


def _round(k: Kubectl, namespace: str, name: str, variant: str) -> tuple[float, int]:
    """Seconds from create to all Running, and the blocks the pods landed in."""
    doc = (
        affinity_job(name, PODS)
        if variant == "affinity"
        else job(name, PODS, policy=POLICY if variant == "with" else None, on_the_fleet=True)
    )
    t0 = time.monotonic()
    k("create", "-n", namespace, "-f", "-", input=json.dumps(doc))
    while len(running := _running(k, namespace, name)) < PODS:
        if time.monotonic() - t0 > 180:
            raise TimeoutError(f"job {name}: {len(running)} of {PODS} pods Running after 180 s")
        time.sleep(0.1)
    seconds = time.monotonic() - t0
    blocks = len({BLOCKS[p["spec"]["nodeName"]][0] for p in running})
    k("delete", "job", name, "-n", namespace, "--cascade=foreground", "--wait=false")
    k.run("delete", "pods", "-n", namespace, "-l", f"app={name}", "--grace-period=1",
          "--timeout=90s", check=False, timeout=120)  # fmt: skip
    procs.wait_for(lambda: not k.json("get", "pods", "-n", namespace, "-l", f"app={name}")["items"],
                   f"{name}'s pods gone", timeout=120)  # fmt: skip
    return seconds, blocks


def run_e2e_across_bench() -> list[dict[str, Any]]:
    cluster, started_here = running_cluster()
    k = cluster.kubectl
    namespace = f"ml-bench-{secrets.token_hex(3)}"
    gangs = bool(cluster.info.get("workload_scheduling"))
    variants = ("with", "affinity", "without") if gangs else ("with", "without")
    results: dict[str, list[tuple[float, int]]] = {v: [] for v in variants}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-across-") as tmp, across_fleet(k, Path(tmp)):
            k("create", "namespace", namespace)
            procs.wait_for(
                lambda: k.run("get", "sa", "default", "-n", namespace, check=False).returncode == 0,
                f"serviceaccount default in {namespace}",
            )
            for i in range(ROUNDS):
                for variant in variants if i % 2 == 0 else variants[::-1]:
                    results[variant].append(_round(k, namespace, f"{variant}-{i}", variant))
    finally:
        k.run("delete", "namespace", namespace, "--wait=false", check=False)
        if started_here:
            subprocess.run([sys.executable, "-m", "e2e.cluster", "down"], check=False)

    def row(variant: str, what: str) -> dict[str, Any]:
        seconds = [s for s, _ in results[variant]]
        spread = sorted({b for _, b in results[variant]})
        return {
            "job": what,
            "rounds": len(seconds),
            "median s": f"{statistics.median(seconds):.2f}",
            "min s": f"{min(seconds):.2f}",
            "max s": f"{max(seconds):.2f}",
            "blocks spanned": ", ".join(map(str, spread)),
        }

    how = "a gang PodGroup" if gangs else "first-pod affinity"
    what = {
        "with": f"{PODS} pods, required keepTogether network-tier-2 ({how})",
        "affinity": f"{PODS} pods, first-pod affinity by hand (no policy, same requests)",
        "without": f"{PODS} pods, no policy",
    }
    rows = [row(v, what[v]) for v in variants]
    base = statistics.median(s for s, _ in results["without"])
    for variant, out in zip(variants, rows, strict=True):
        out["÷ no policy"] = f"{statistics.median(s for s, _ in results[variant]) / base:.2f}"
    return rows
