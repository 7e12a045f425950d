"""The figures of one fleet size: admission latency next to no mutation, pods bound per
second by each scheduler, the extender's own answer time, and `explain --kubeconfig`."""

from __future__ import annotations

import copy
import http.client
import json
import ssl
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.e2e.bench_e2e import POD as ADMISSION_POD
from benchmarks.scale.api import Api, watch_lines
from benchmarks.scale.fleet import write_all
from benchmarks.scale.stack import NAMESPACE, Stack
from e2e import procs
from e2e.topoplace.install import REPO, VENV_BIN

__all__ = [
    "admission",
    "delete_pods",
    "explain_seconds",
    "extender_times",
    "percentile",
    "sched_pod",
    "throughput",
]

_PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def delete_pods(api: Api) -> None:
    """Every bench pod, at once: bound pods have no kubelet to confirm a graceful delete."""
    api.call("DELETE", f"{_PODS}?gracePeriodSeconds=0")
    procs.wait_for(
        lambda: not api.get(f"{_PODS}?limit=1")["items"],
        "bench pods gone",
        timeout=300,
        interval=0.5,
    )


def admission(stack: Stack, pods: int, warmup: int = 20) -> dict[str, float]:
    """p50/p99 ms of pod create with no mutation and through the webhook, interleaved."""
    mutated = copy.deepcopy(ADMISSION_POD)
    plain = copy.deepcopy(mutated)
    del plain["metadata"]["labels"]["topoplace.io/policy"]
    bodies = {"none": json.dumps(plain).encode(), "webhook": json.dumps(mutated).encode()}
    procs.wait_for(  # the API server takes a moment to call a webhook it was just told of
        lambda: _mutated(stack.api.call("POST", _PODS, bodies["webhook"])[1]),
        "the bench pod to come back mutated",
        timeout=60,
        interval=0.5,
    )
    samples: dict[str, list[float]] = {"none": [], "webhook": []}
    for i in range(warmup + pods):
        order = ("none", "webhook") if i % 2 else ("webhook", "none")
        for path in order:
            ms = stack.api.call("POST", _PODS, bodies[path])[2]
            if i >= warmup:
                samples[path].append(ms)
    delete_pods(stack.api)
    out = {}
    for path, values in samples.items():
        out[f"{path} p50"] = statistics.median(values)
        out[f"{path} p99"] = percentile(values, 0.99)
    return out


def _mutated(pod: dict[str, Any]) -> bool:
    return bool((pod["metadata"].get("annotations") or {}).get("topoplace.io/applied"))


def sched_pod(scheduler: str, containers: int = 1) -> dict[str, Any]:
    """A Guaranteed pod with one GPU (the numa scheduler's extender manages nvidia.com/gpu)."""
    limits = {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"}
    spec_containers = [{"name": "worker", "image": "busybox", "resources": {"limits": limits}}]
    spec_containers += [
        {
            "name": f"side-{i}",
            "image": "busybox",
            "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
        }
        for i in range(1, containers)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "sched-", "namespace": NAMESPACE},
        "spec": {
            "schedulerName": scheduler,
            "restartPolicy": "Never",
            "containers": spec_containers,
        },
    }


class _Binds:
    """Notes when each pod of the bench namespace is first seen bound: a list, then a watch
    from the list's resourceVersion. kube-apiserver closes a watcher that falls behind (a
    burst of a thousand pods is one); each time the watch ends, list again and resume, so no
    binding goes unseen (one found by a list counts from that list)."""

    def __init__(self, api: Api) -> None:
        self.bound: dict[str, float] = {}
        self.resumed = 0  # watches the server ended and this reopened
        self.stopped = False  # set when done: the next event (the pods' deletion) ends it
        self._api = api
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _note(self, pod: dict[str, Any], when: float) -> None:
        name = (pod.get("metadata") or {}).get("name")
        if (pod.get("spec") or {}).get("nodeName") and name not in self.bound:
            self.bound[name] = when

    def _follow(self) -> None:
        while not self.stopped:
            try:
                listed = self._api.get(_PODS)
                now = time.monotonic()
                for pod in listed.get("items") or ():
                    self._note(pod, now)
                rv = listed["metadata"]["resourceVersion"]
                path = f"{_PODS}?watch=1&resourceVersion={rv}&timeoutSeconds=1800"
                for event in watch_lines(self._api, path):
                    if self.stopped or event.get("type") == "ERROR":
                        break  # 410 Gone and the like: list again
                    self._note(event.get("object") or {}, time.monotonic())
            except (OSError, RuntimeError, ValueError):
                time.sleep(0.2)  # the server went away for a moment: list again
            self.resumed += not self.stopped


def throughput(stack: Stack, scheduler: str, pods: int, *, timeout: float) -> dict[str, Any]:
    """Pods bound per second by `scheduler`: every pod is created first, then the scheduler
    starts; the rate runs from the first binding to the last."""
    binds = _Binds(stack.api)
    body = sched_pod(scheduler)
    write_all(lambda _i: stack.api.create(_PODS, body), range(pods), workers=4)
    with stack.scheduler(scheduler):
        deadline = time.monotonic() + timeout
        while len(binds.bound) < pods and time.monotonic() < deadline:
            time.sleep(0.2)
    times = sorted(binds.bound.values())
    binds.stopped = True
    delete_pods(stack.api)
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    rate = (len(times) - 1) / span if span else 0.0
    return {"bound": len(times), "pods/s": rate, "watch resumed": binds.resumed}


def extender_times(
    stack: Stack, names: list[str], *, calls: int, containers: int = 1
) -> dict[str, float]:
    """p50/p99 ms of the extender's filter and prioritize over HTTPS, all `names` at once."""
    context = ssl.create_default_context(cafile=str(stack.webhook_ca))
    conn = http.client.HTTPSConnection("127.0.0.1", stack.webhook_port, context=context)
    body = json.dumps({"Pod": sched_pod("x", containers), "NodeNames": names}).encode()
    out = {}
    try:
        for verb in ("filter", "prioritize"):
            samples = []
            for _ in range(calls):
                started = time.perf_counter()
                conn.request(
                    "POST",
                    f"/scheduler/{verb}",
                    body=body,
                    headers={"Content-Type": "application/json"},
                )
                response = conn.getresponse()
                response.read()
                samples.append((time.perf_counter() - started) * 1000)
                if response.status != 200:
                    raise RuntimeError(f"extender {verb}: HTTP {response.status}")
            out[f"{verb} p50"] = statistics.median(samples)
            out[f"{verb} p99"] = percentile(samples, 0.99)
    finally:
        conn.close()
    return out


def explain_seconds(stack: Stack, work: Path) -> float:
    """Wall time of `topoplace-webhook explain --kubeconfig` for one pod."""
    pod = copy.deepcopy(ADMISSION_POD)
    pod["metadata"] = {
        "name": "explained",
        "namespace": NAMESPACE,
        "labels": pod["metadata"]["labels"],
    }
    path = work / "explain-pod.json"
    path.write_text(json.dumps(pod))
    started = time.monotonic()
    done = subprocess.run(
        [
            str(VENV_BIN / "topoplace-webhook"),
            "explain",
            str(path),
            f"--kubeconfig={stack.cp.admin_kubeconfig}",
            f"--policies={REPO / 'policies'}",
            "--output=json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    seconds = time.monotonic() - started
    if done.returncode not in (0, 1):
        raise RuntimeError(f"explain exited {done.returncode}: {done.stderr[-500:]}")
    return seconds
