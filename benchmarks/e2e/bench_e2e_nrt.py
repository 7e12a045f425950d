"""Free capacity per NUMA node on the real kubelets: how soon the agent's NodeResourceTopology
shows a pod's GPU taken and free again, and how many writes a pod start costs.

On one DGX H100 node, a Guaranteed 1-GPU pod (no policy) is created, seen Running, then
deleted, several times. Timed from the create (delete) call to the published
NodeResourceTopology showing one GPU fewer (again all) free, polled every 50 ms. Writes are
the agent's successful creates and patches of the object in the API server's audit log, from
a pod's create until its follow-up reads are over (8 s after it runs). Uses a running
`make cluster`, or starts one.
"""

from __future__ import annotations

import json
import secrets
import statistics
import subprocess
import sys
import time
from typing import Any

from benchmarks.e2e.bench_e2e import running_cluster
from e2e import procs
from e2e.kube import Kubectl
from tests.e2e.nrt_truth import nrt_writes, plain_pod, published

__all__ = ["run_e2e_nrt_bench"]

NODE = "dgx-h100-a"
RUNS = 5
SETTLE = 8.0  # the agent's follow-up reads end 7 s after a pod event


def _free_gpus(k: Kubectl) -> int | None:
    free = published(k, NODE)
    return None if free is None else sum(z.get("nvidia.com/gpu", 0) for z in free.values())


def _until_free(k: Kubectl, want: int, t0: float) -> float:
    while _free_gpus(k) != want:
        if time.monotonic() - t0 > 120:
            raise TimeoutError(f"NodeResourceTopology {NODE} never showed {want} GPUs free")
        time.sleep(0.05)
    return time.monotonic() - t0


def _cycle(k: Kubectl, cluster: Any, namespace: str, name: str, idle: int) -> dict[str, float]:
    writes_before = len(nrt_writes(cluster, NODE))
    t0 = time.monotonic()
    k("create", "-n", namespace, "-f", "-", input=json.dumps(plain_pod(name, NODE, gpus=1)))
    taken = _until_free(k, idle - 1, t0)
    procs.wait_for(
        lambda: k.json("get", "pod", name, "-n", namespace)["status"].get("phase") == "Running",
        f"{name} Running",
    )
    time.sleep(SETTLE)  # a measurement window: the follow-up reads run in it
    per_start = len(nrt_writes(cluster, NODE)) - writes_before
    t1 = time.monotonic()
    k("delete", "pod", name, "-n", namespace, "--wait=false")
    freed = _until_free(k, idle, t1)
    procs.wait_for(
        lambda: k.run("get", "pod", name, "-n", namespace, check=False).returncode != 0,
        f"{name} gone",
    )
    return {"taken": taken, "freed": freed, "writes": per_start}


def run_e2e_nrt_bench() -> list[dict[str, Any]]:
    cluster, started_here = running_cluster()
    k = cluster.kubectl
    namespace = f"ml-bench-{secrets.token_hex(3)}"
    try:
        k("create", "namespace", namespace)
        procs.wait_for(
            lambda: k.run("get", "sa", "default", "-n", namespace, check=False).returncode == 0,
            f"serviceaccount default in {namespace}",
        )
        idle = procs.wait_for(lambda: _free_gpus(k), f"NodeResourceTopology {NODE}", timeout=120)
        cycles = [_cycle(k, cluster, namespace, f"nrt-{i}", idle) for i in range(RUNS)]
    finally:
        k.run("delete", "namespace", namespace, "--wait=false", check=False)
        if started_here:
            subprocess.run([sys.executable, "-m", "e2e.cluster", "down"], check=False)

    def row(what: str, key: str, unit: str) -> dict[str, Any]:
        values = [c[key] for c in cycles]
        return {
            "measure": what,
            "runs": len(values),
            "median": f"{statistics.median(values):.2f} {unit}",
            "max": f"{max(values):.2f} {unit}",
        }

    return [
        row("pod create → its GPU shown taken", "taken", "s"),
        row("pod delete → its GPU shown free", "freed", "s"),
        row("agent writes per pod start", "writes", "writes"),
    ]
