"""Pod create latency through the real kube-apiserver, with our webhook called and without.

The same pod is created over one keep-alive HTTPS connection, once opted in (the API server
calls the webhook, which mutates it) and once without the opt-in label (the webhook's
objectSelector skips it), alternating A-B-B-A so drift on this noisy machine hits both alike.
The pods name a scheduler that does not exist, so kube-scheduler leaves them alone and the
figures are admission plus storage only. Uses a running `make cluster`, or starts one.
"""

from __future__ import annotations

import copy
import http.client
import json
import secrets
import ssl
import statistics
import subprocess
import sys
import time
from typing import Any
from urllib.parse import urlparse

from e2e import procs
from e2e.cluster import Cluster, load

__all__ = ["run_e2e_bench", "running_cluster"]

PODS = 300  # per path, after warm-up
WARMUP = 20

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "generateName": "bench-",
        "labels": {"topoplace.io/policy": "single-numa-partial"},
    },
    "spec": {
        "schedulerName": "topoplace-bench-unscheduled",
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "trainer",
                "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                "command": ["torchrun", "--nproc-per-node=2", "train.py"],
                "resources": {"limits": {"nvidia.com/gpu": 2}},
            }
        ],
    },
}


def running_cluster() -> tuple[Cluster, bool]:
    """The running `make cluster`, or one started here (True: stop it afterwards)."""
    try:
        return load(), False
    except FileNotFoundError:
        subprocess.run([sys.executable, "-m", "e2e.cluster", "up"], check=True)
        return load(), True


def _connection(cluster: Cluster) -> http.client.HTTPSConnection:
    pki = cluster.state / "pki"
    context = ssl.create_default_context(cafile=cluster.info["ca"])
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    url = urlparse(cluster.info["server"])
    return http.client.HTTPSConnection(url.hostname, url.port, context=context)


def _create(conn: http.client.HTTPSConnection, namespace: str, body: bytes) -> float:
    started = time.perf_counter()
    conn.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        body=body,
        headers={"Content-Type": "application/json"},
    )
    response = conn.getresponse()
    payload = response.read()
    elapsed = time.perf_counter() - started
    if response.status != 201:
        raise RuntimeError(f"pod create answered {response.status}: {payload[:300]!r}")
    return elapsed * 1000


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_e2e_bench() -> list[dict[str, Any]]:
    cluster, started_here = running_cluster()
    k = cluster.kubectl
    namespace = f"ml-bench-{secrets.token_hex(3)}"
    k("create", "namespace", namespace)
    procs.wait_for(
        lambda: k.run("get", "sa", "default", "-n", namespace, check=False).returncode == 0,
        f"serviceaccount default in {namespace}",
    )
    plain = copy.deepcopy(POD)
    del plain["metadata"]["labels"]["topoplace.io/policy"]
    bodies = {"webhook": json.dumps(POD).encode(), "none": json.dumps(plain).encode()}
    samples: dict[str, list[float]] = {"webhook": [], "none": []}
    conn = _connection(cluster)
    try:
        for i in range(WARMUP + PODS):
            order = ("webhook", "none") if i % 2 == 0 else ("none", "webhook")
            for path in order:
                ms = _create(conn, namespace, bodies[path])
                if i >= WARMUP:
                    samples[path].append(ms)
    finally:
        conn.close()
        # Unscheduled pods go at once with their namespace (no kubelet to wait for).
        k.run("delete", "namespace", namespace, "--wait=false", check=False)
        if started_here:
            subprocess.run([sys.executable, "-m", "e2e.cluster", "down"], check=False)
    rows: list[dict[str, Any]] = []
    for path, label in (
        ("webhook", "opted in: our webhook called"),
        ("none", "not opted in: webhook skipped"),
    ):
        rows.append(
            {
                "pod create": label,
                "pods": len(samples[path]),
                "p50 ms": statistics.median(samples[path]),
                "p99 ms": _percentile(samples[path], 0.99),
            }
        )
    rows.append(
        {
            "pod create": "added by the webhook",
            "pods": "",
            "p50 ms": rows[0]["p50 ms"] - rows[1]["p50 ms"],
            "p99 ms": rows[0]["p99 ms"] - rows[1]["p99 ms"],
        }
    )
    return rows
