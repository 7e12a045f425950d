"""A burst of 100 pods for the NUMA-aware scheduler on the real kubelets, with and without
the extender's accounting of pods bound but not shown yet in the NodeResourceTopology
(issue 45; `serve --no-scheduler-accounting` turns it off).

The two DGX H100s of tests/e2e/test_numa_burst.py (`single-numa-node`, scope pod, static CPU
manager), each filled to 3 free GPUs on each NUMA node; 100 pods of 2 GPUs created in one
call. One such pod fits per NUMA node: 4 run, 96 must wait. Figures, polled every 0.2 s:

- decided: seconds from the create call until kube-scheduler has decided every pod once
  (bound, or turned away: PodScheduled False), and the pods/s that makes;
- bound and refused (phase Failed, TopologyAffinityError) once nothing changed for 10 s or
  180 s passed: refusals per 100. A refused pod frees what kube-scheduler counts on the node,
  so without the accounting waiting pods are bound, and refused, again.

Uses a running `make cluster`, or starts one. Between the variants the webhook Deployment
is rolled (the flag added, then rolled back).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.e2e.bench_e2e import running_cluster
from e2e.kube import Kubectl
from tests.e2e.helpers import training_pod
from tests.e2e.test_numa_burst import NODES, POLICY, burst_fleet, create_all, fill, pinned
from tests.e2e.test_numa_scheduler import wait_free

__all__ = ["run_e2e_burst_bench"]

PODS = 100
GPUS = 2
QUIET_S = 10.0
LIMIT_S = 180.0
WEBHOOK = ("deployment/topoplace-webhook", "-n", "topoplace-system")
FLAG = "--no-scheduler-accounting"


def _state(k: Kubectl, ns: str) -> tuple[int, int, int, int]:
    """decided, bound, running, refused."""
    decided = bound = running = refused = 0
    for p in k.json("get", "pods", "-n", ns, "-l", "burst=bench")["items"]:
        status, node = p.get("status") or {}, (p.get("spec") or {}).get("nodeName")
        scheduled = [c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"]
        decided += bool(node or scheduled)
        bound += bool(node)
        running += status.get("phase") == "Running"
        refused += status.get("phase") == "Failed"
    return decided, bound, running, refused


def _burst(k: Kubectl, ns: str) -> dict[str, float]:
    pods = []
    for i in range(PODS):
        p = pinned(training_pod(f"burst-{i}", POLICY, GPUS), *NODES)
        p["metadata"]["labels"]["burst"] = "bench"
        pods.append(p)
    t0 = time.monotonic()
    create_all(k, pods, ns)
    decided_s, last, changed = 0.0, None, t0
    while (now := time.monotonic()) - changed < QUIET_S and now - t0 < LIMIT_S:
        state = _state(k, ns)
        if not decided_s and state[0] == PODS:
            decided_s = now - t0
        if state != last:
            last, changed = state, now
        time.sleep(0.2)
    assert last is not None
    _, bound, running, refused = last
    k.run("delete", "pods", "-n", ns, "-l", "burst=bench", "--grace-period=1", "--wait=true",
          timeout=300)  # fmt: skip
    return {"decided": decided_s, "bound": bound, "running": running, "refused": refused}


def _accounting(k: Kubectl, on: bool) -> None:
    if on:
        k("rollout", "undo", *WEBHOOK)
    else:
        patch = [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": FLAG}]
        k("patch", *WEBHOOK, "--type=json", "-p", json.dumps(patch))
    k.run("rollout", "status", *WEBHOOK, "--timeout=240s", timeout=260)


def run_e2e_burst_bench() -> list[dict[str, Any]]:
    cluster, started_here = running_cluster()
    k = cluster.kubectl
    results: dict[str, dict[str, float]] = {}
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-burst-") as tmp,
            burst_fleet(k, Path(tmp)) as ns,
        ):
            for node, tag in zip(NODES, "ab", strict=True):
                # 4 GPUs on NUMA node 0, 1 on node 1, the 4 gone, 1 more on 0: 3 + 3.
                fill(k, ns, node, [(f"{tag}-big", 4), (f"{tag}-1", 1), (f"{tag}-big", 0),
                                   (f"{tag}-0", 1)])  # fmt: skip
            for node in NODES:
                wait_free(cluster, k, node, (3, 3))
            results["with"] = _burst(k, ns)
            for node in NODES:
                wait_free(cluster, k, node, (3, 3))
            _accounting(k, on=False)
            try:
                results["without"] = _burst(k, ns)
            finally:
                _accounting(k, on=True)
    finally:
        if started_here:
            subprocess.run([sys.executable, "-m", "e2e.cluster", "down"], check=False)
    what = {"with": "with the accounting", "without": f"without (`{FLAG}`)"}
    return [
        {
            "extender": what[v],
            "pods": PODS,
            "all decided s": f"{r['decided']:.1f}" if r["decided"] else f"> {LIMIT_S:.0f}",
            "pods/s": f"{PODS / r['decided']:.1f}" if r["decided"] else "-",
            "running": int(r["running"]),
            "refused per 100": int(r["refused"] * 100 / PODS),
        }
        for v, r in results.items()
    ]
