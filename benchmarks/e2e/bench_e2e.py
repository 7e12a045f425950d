"""Pod create latency through the real kube-apiserver: our webhook next to its peers.

One pod is created over one keep-alive HTTPS connection along each path, the paths
interleaved in every round (their order rotating) so drift on this noisy machine hits all
alike: (a) no mutation (no opt-in label: our webhook's objectSelector skips it); (b) our
webhook; (c) a MutatingAdmissionPolicy writing the same patch in CEL inside the API server,
the floor (peers/map_policy.py says what it cannot express); (d) Kyverno's admission
controller writing the same patch (peers/kyverno.py), when e2e/build-kyverno.sh built it;
otherwise the results say why; (e, f) the floors of a webhook on this path: two bare
webhooks behind a Service and the stand-in for kube-proxy as ours is, one aiohttp, one Go
net/http, each parsing the review and answering with our patch, fixed (peers/bare.py).
The patch the peers write is our engine's answer for this pod, and each peer's first pod is
checked to come back mutated exactly as ours does.
Every pod is different (issue 47): each round's pods carry the round's number in an
environment variable, as a Job's replicas carry their index, so no answer is reused whole;
our webhook's engine still computes the pod form once (webhook/engine/replay).
The pods name a scheduler that does not exist, so kube-scheduler leaves them alone and the
figures are admission plus storage only. Uses a running `make cluster`, or starts one.
"""

from __future__ import annotations

import contextlib
import copy
import http.client
import json
import os
import secrets
import ssl
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from benchmarks.peers.bare import running_bare
from benchmarks.peers.kyverno import (
    apply_until_served,
    kyverno_binary,
    kyverno_policy,
    running_kyverno,
)
from benchmarks.peers.map_policy import PEER_LABEL, map_objects
from e2e import procs
from e2e.cluster import Cluster, load
from webhook.engine.recipe import mutate
from webhook.policy.loader import load_policy_dir

__all__ = ["run_e2e_bench", "running_cluster"]

_REPO = Path(__file__).resolve().parents[2]
_PEER_NAME = "topoplace-bench-peer"

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
                "env": [{"name": "JOB_COMPLETION_INDEX", "value": "0"}],
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


def _create(
    conn: http.client.HTTPSConnection, namespace: str, body: bytes, *, keep: list[Any] | None = None
) -> float:
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
    if keep is not None:
        keep.append(json.loads(payload))
    return elapsed * 1000


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _our_patch(namespace: str) -> list[dict[str, Any]]:
    """What our engine writes for POD with the policies the cluster serves (policies/)."""
    result = mutate(copy.deepcopy(POD), namespace, load_policy_dir(_REPO / "policies"))
    if not result.patch:
        raise RuntimeError("the bench pod got no patch from the shipped policies")
    return result.patch


def _bodies(peers: list[str], index: int = 0) -> dict[str, bytes]:
    """Each path's pod, numbered `index` (its JOB_COMPLETION_INDEX)."""
    numbered = copy.deepcopy(POD)
    numbered["spec"]["containers"][0]["env"][0]["value"] = str(index)
    plain = copy.deepcopy(numbered)
    del plain["metadata"]["labels"]["topoplace.io/policy"]
    bodies = {"none": json.dumps(plain).encode(), "webhook": json.dumps(numbered).encode()}
    for peer in peers:
        labelled = copy.deepcopy(plain)
        labelled["metadata"]["labels"][PEER_LABEL] = peer
        bodies[peer] = json.dumps(labelled).encode()
    return bodies


def _mutated(pod: dict[str, Any]) -> tuple[Any, ...]:
    """What a mutation changed, to compare peers with ours."""
    spec = pod["spec"]
    applied = (pod["metadata"].get("annotations") or {}).get("topoplace.io/applied")
    trainer = spec["containers"][0]
    return (
        applied,
        spec.get("affinity"),
        trainer.get("resources"),
        trainer.get("command"),
        trainer.get("env"),
        spec.get("initContainers"),
    )


def _wait_mutating(
    conn: http.client.HTTPSConnection, namespace: str, body: bytes, peer: str
) -> dict[str, Any]:
    """Create `peer`'s pod until it comes back mutated (a policy takes a moment to load)."""
    deadline = time.monotonic() + 120
    while True:
        created: list[Any] = []
        _create(conn, namespace, body, keep=created)
        if (created[0]["metadata"].get("annotations") or {}).get("topoplace.io/applied"):
            return created[0]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{peer}: pods still come back unmutated after 120 s")
        time.sleep(0.5)


def run_e2e_bench() -> dict[str, list[dict[str, Any]]]:
    cluster, started_here = running_cluster()
    k = cluster.kubectl
    namespace = f"ml-bench-{secrets.token_hex(3)}"
    k("create", "namespace", namespace)
    procs.wait_for(
        lambda: k.run("get", "sa", "default", "-n", namespace, check=False).returncode == 0,
        f"serviceaccount default in {namespace}",
    )
    patch = _our_patch(namespace)
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        peers = ["map"]
        k.apply(map_objects(_PEER_NAME, patch))
        stack.callback(
            k.run,
            "delete",
            "mutatingadmissionpolicybinding,mutatingadmissionpolicy",
            _PEER_NAME,
            check=False,
        )
        binary, version = kyverno_binary()
        if binary is None:
            notes.append(f"Kyverno: no row. {version}")
        else:
            try:
                stack.enter_context(
                    running_kyverno(
                        k,
                        Path(cluster.info["kubeconfig"]),
                        binary,
                        version,
                        cluster.state / "kyverno.log",
                    )
                )
                apply_until_served(k, kyverno_policy(_PEER_NAME, patch))
                stack.callback(k.run, "delete", "clusterpolicy", _PEER_NAME, check=False)
                peers.append("kyverno")
            except (RuntimeError, subprocess.CalledProcessError) as exc:
                notes.append(f"Kyverno {version}: no row; it did not come up: {exc}")
        peers += stack.enter_context(running_bare(k, patch, notes))
        loads = [{"when": "before timing", "load 1/5/15 min": _load()}]
        samples = _measure(cluster, namespace, peers)
        loads.append({"when": "after timing", "load 1/5/15 min": _load()})
    k.run("delete", "namespace", namespace, "--wait=false", check=False)
    if started_here:
        subprocess.run([sys.executable, "-m", "e2e.cluster", "down"], check=False)
    result = {
        "e2e": _table(samples, peers),
        "Machine load (other sessions' work; figures under load are not final)": loads,
        "Added latency, ours ÷ peer": _ratios(samples, peers),
    }
    if notes:
        result["Peers without a row"] = [{"peer": n.split(":", 1)[0], "why": n} for n in notes]
    return result


def _load() -> str:
    return " / ".join(f"{v:.1f}" for v in os.getloadavg())


def _measure(cluster: Cluster, namespace: str, peers: list[str]) -> dict[str, list[float]]:
    bodies = _bodies(peers)
    paths = list(bodies)
    conn = _connection(cluster)
    try:
        ours = _wait_mutating(conn, namespace, bodies["webhook"], "webhook")
        for peer in peers:
            theirs = _wait_mutating(conn, namespace, bodies[peer], peer)
            if _mutated(theirs) != _mutated(ours):
                raise RuntimeError(f"{peer} wrote another pod than ours: {_mutated(theirs)}")
        samples: dict[str, list[float]] = {p: [] for p in paths}
        rounds = [_bodies(peers, i + 1) for i in range(WARMUP + PODS)]  # every pod different
        for i, numbered in enumerate(rounds):
            shift = i % len(paths)
            for path in paths[shift:] + paths[:shift]:
                ms = _create(conn, namespace, numbered[path])
                if i >= WARMUP:
                    samples[path].append(ms)
    finally:
        conn.close()
    return samples


_LABELS = {
    "none": "(a) no mutation",
    "webhook": "(b) Topoplace webhook",
    "map": "(c) MutatingAdmissionPolicy (CEL, same patch)",
    "kyverno": "(d) Kyverno admission controller (same patch)",
    "bare-aiohttp": "(e) bare aiohttp webhook (parse, fixed patch)",
    "bare-go": "(f) bare Go net/http webhook (parse, fixed patch)",
}
# Issue 47's goals for ours ÷ each peer in added p50; bare Go: what the language costs.
_GOALS = {
    "bare-aiohttp": ("bare aiohttp", "≤ 1.25"),
    "bare-go": ("bare Go", "shown: the cost of the language"),
    "map": ("MAP", "≤ 2"),
    "kyverno": ("Kyverno", "≤ 0.5"),
}


def _stats(samples: list[float]) -> dict[str, float]:
    return {
        "p50 ms": statistics.median(samples),
        "p99 ms": _percentile(samples, 0.99),
        "p99.9 ms": _percentile(samples, 0.999),
    }


def _table(samples: dict[str, list[float]], peers: list[str]) -> list[dict[str, Any]]:
    floor = _stats(samples["none"])
    rows = []
    for path in ["none", "webhook", *peers]:
        stats = _stats(samples[path])
        rows.append(
            {
                "pod create": _LABELS[path],
                "pods": len(samples[path]),
                **stats,
                "added p50 ms": stats["p50 ms"] - floor["p50 ms"],
                "added p99 ms": stats["p99 ms"] - floor["p99 ms"],
            }
        )
    return rows


def _ratios(samples: dict[str, list[float]], peers: list[str]) -> list[dict[str, Any]]:
    rows = _table(samples, peers)
    by = {path: row for path, row in zip(["none", "webhook", *peers], rows, strict=True)}
    ours = by["webhook"]
    return [
        {
            "ratio": f"ours ÷ {name}",
            "added p50": ours["added p50 ms"] / by[peer]["added p50 ms"],
            "added p99": ours["added p99 ms"] / by[peer]["added p99 ms"],
            "goal (p50)": goal,
        }
        for peer, (name, goal) in _GOALS.items()
        if peer in by
    ]
