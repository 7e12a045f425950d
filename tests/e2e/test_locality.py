"""Measured NUMA locality on the real kubelets (issue 49, item 5).

- A pod of Topoplace's image is a real process (e2e/go's runtime starts it on this host): the
  locality `topoplace-agent audit` reports for it equals what the kernel says of the process
  the runtime started (its `numa_maps` and `Cpus_allowed_list`, read here on their own). The
  kubelets run with `cgroupsPerQOS: false`, so the pod has no cgroup: the audit finds the
  process by the kubelet's files its container mounts (docs/audit.md).
- Two otherwise equal nodes, one whose NUMA counters show remote allocations: its agent
  publishes the figure on its NodeResourceTopology and the extender's prioritize scores it
  lower for a pod whose policy sets `placement.remoteAccessWeight`, and the same for both
  without it.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from e2e.nodes.manage import audit_argv
from e2e.nodes.start import node_procs
from e2e.topoplace.install import WEBHOOK_PORT, pods_of
from tests.agent.audit.cgroupfs import numastat_text
from tests.agent.discovery import machines
from tests.e2e.helpers import cluster_cli, patch_policies
from webhook.engine.outcome import DEFAULT_PREFETCH_IMAGE as IMAGE

NODE = "dgx-h100-a"
HOT, COOL = "locality-hot", "locality-cool"
POLICY = "locality-e2e"
ATTRIBUTE = "topoplace.io/remote-access-percent"
SERVICE_NAME = "topoplace-webhook.topoplace-system.svc"
# Tries at reading the process, the audit, and the process again with no page moving between.
STEADY_TRIES = 5


# --- the kernel, read here on its own (not through the agent's readers) -------------------


def kernel_bytes(pid: int) -> dict[int, int]:
    """Bytes per NUMA node over the process's mappings, as /proc/<pid>/numa_maps prints them."""
    total: dict[int, int] = {}
    for line in Path(f"/proc/{pid}/numa_maps").read_text().splitlines():
        words = line.split()[2:]
        page = next((int(w[18:]) for w in words if w.startswith("kernelpagesize_kB=")), 4)
        for w in words:
            if (m := re.fullmatch(r"N(\d+)=(\d+)", w)) is not None:
                total[int(m[1])] = total.get(int(m[1]), 0) + int(m[2]) * page * 1024
    return dict(sorted(total.items()))


def cpulist(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def allowed_cpus(pid: int) -> set[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return cpulist(line.partition(":")[2])
    raise AssertionError(f"/proc/{pid}/status: no Cpus_allowed_list")


def runtime_pid(cluster: Cluster, node: str, container_id: str) -> int:
    """The PID the node's runtime says it started the container as (its own log line)."""
    _, runtime, _ = node_procs(node)
    log = procs.log_path(cluster.state, runtime).read_text()
    (pid,) = re.findall(rf"container {re.escape(container_id)} running as pid (\d+):", log)
    return int(pid)


# --- the audit ------------------------------------------------------------------------------


def audited(cluster: Cluster, node: str, namespace: str, pod: str) -> dict[str, Any]:
    """`topoplace-agent audit --output json` as the node's agent runs it, the pods' UIDs from
    the API server: the pod's locality entry."""
    argv = [*audit_argv(cluster.nodes[node], "json"), f"--node-name={node}",
            f"--kubeconfig={cluster.kubeconfig}"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    pods = json.loads(done.stdout)["locality"]["pods"]
    (entry,) = [p for p in pods if (p["namespace"], p["pod"]) == (namespace, pod)]
    return entry


def sleeper(name: str) -> dict[str, Any]:
    """A Guaranteed 1-GPU pod of Topoplace's image (run for real) holding 64 MiB it wrote."""
    code = "import time\nheld = b'x' * (64 << 20)\nwhile True:\n    time.sleep(3600)\n"
    resources = {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "holder",
                    "image": IMAGE,
                    "command": ["python3", "-c", code],
                    "resources": {"limits": resources, "requests": resources},
                }
            ],
        },
    }


def test_the_audit_reads_what_the_kernel_says_of_a_pods_process(
    cluster: Cluster, kubectl: Kubectl, namespace: str
) -> None:
    kubectl.run("create", "-n", namespace, "-f", "-", input=json.dumps(sleeper("holder")))
    running = procs.wait_for(
        lambda: (
            (p := kubectl.json("get", "pod", "holder", "-n", namespace))["status"].get("phase")
            == "Running"
            and p
        ),
        "the pod of Topoplace's image running",
        timeout=90,
    )
    (status,) = running["status"]["containerStatuses"]
    pid = runtime_pid(cluster, NODE, status["containerID"].partition("://")[2])
    for _ in range(STEADY_TRIES):
        before = kernel_bytes(pid)
        entry = audited(cluster, NODE, namespace, "holder")
        after = kernel_bytes(pid)
        if before == after:
            break
    assert before == after, f"pid {pid}'s pages moved during each of {STEADY_TRIES} audits"
    # The python process holds what it wrote: at least the 64 MiB.
    assert sum(before.values()) >= 64 << 20, before
    assert entry["source"] == "numa_maps", entry  # no pod cgroup: cgroupsPerQOS is false
    assert entry["memoryBytesByNumaNode"] == {str(n): b for n, b in before.items()}, entry

    gpu_numa = set(entry["gpuNumaNodes"])
    assert gpu_numa, entry
    share = sum(b for n, b in before.items() if n in gpu_numa) / sum(before.values())
    assert entry["memoryShare"] == round(share, 4), entry
    assert entry["verdict"] == ("local" if share >= 0.8 else "remote"), entry
    sysfs = Path(cluster.nodes[NODE]["sysfs"]) / "devices/system/node"
    near = set().union(*(cpulist((sysfs / f"node{n}/cpulist").read_text()) for n in gpu_numa))
    allowed = allowed_cpus(pid)
    assert entry["cpuShare"] == round(len(allowed & near) / len(allowed), 4), entry
    print(
        f"\npid {pid} (runtime's log): numa_maps {before}, Cpus_allowed_list {len(allowed)} "
        f"CPUs; audit: {entry['memoryBytesByNumaNode']} ({entry['source']}), memoryShare "
        f"{entry['memoryShare']}, cpuShare {entry['cpuShare']}, verdict {entry['verdict']} "
        f"(GPUs on NUMA {sorted(gpu_numa)})"
    )


# --- placement that learns from it ----------------------------------------------------------


class Allocations:
    """A node's kernel counters (node<N>/numastat in its sysfs tree, the kernel's format),
    moved as a workload would move them: `remote` of each step's pages on another node's CPU."""

    STEP = 1 << 20  # pages per step, far over the agent's 16384-page floor

    def __init__(self, sysfs: Path, remote: float) -> None:
        nodes = sorted((sysfs / "devices/system/node").glob("node[0-9]*"))
        self.paths = [n / "numastat" for n in nodes]
        self.remote = remote
        self.local = self.other = 10**9  # a machine that has run for a while
        self.write()

    def write(self) -> None:
        # Whole or not at all, as the kernel prints it: the agent never reads half a file.
        for path in self.paths:
            path.with_name("numastat.new").write_text(numastat_text(self.local, self.other))
            os.replace(path.with_name("numastat.new"), path)

    def step(self) -> None:
        self.other += int(self.STEP * self.remote)
        self.local += self.STEP - int(self.STEP * self.remote)
        self.write()


def published_percent(kubectl: Kubectl, node: str) -> int | None:
    """The highest remote-access percent the node's zones publish; None when none does."""
    done = kubectl.run("get", "noderesourcetopology", node, "-o", "json", check=False)
    if done.returncode != 0:
        return None
    values = [
        int(a["value"])
        for z in json.loads(done.stdout).get("zones") or []
        for a in z.get("attributes") or []
        if a.get("name") == ATTRIBUTE
    ]
    return max(values) if values else None


def prioritize(cluster: Cluster, kubectl: Kubectl, pod: dict[str, Any]) -> dict[str, int]:
    """`POST /scheduler/prioritize` for HOT and COOL, over HTTPS to a Ready webhook pod as
    kube-scheduler reaches it (its Service's name checked against the certificate)."""
    ready = [
        p["status"]["podIP"]
        for p in pods_of(kubectl, "topoplace-webhook")
        if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p["status"].get("conditions") or []
        )
    ]
    assert ready, "no Ready webhook pod to ask the extender"
    context = ssl.create_default_context(
        cafile=str(cluster.state / "pki" / "topoplace-webhook-ca.crt")
    )
    conn = http.client.HTTPSConnection(ready[0], WEBHOOK_PORT, context=context, timeout=10)
    raw = socket.create_connection((ready[0], WEBHOOK_PORT), timeout=10)
    conn.sock = context.wrap_socket(raw, server_hostname=SERVICE_NAME)
    body = json.dumps({"Pod": pod, "NodeNames": [HOT, COOL]}).encode()
    try:
        conn.request("POST", "/scheduler/prioritize", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        text = response.read().decode()
    finally:
        conn.close()
    assert response.status == 200, f"extender answered {response.status}: {text}"
    return {e["Host"]: e["Score"] for e in json.loads(text)}


def four_gpu_pod(policy: str | None) -> dict[str, Any]:
    labels = {"topoplace.io/policy": policy} if policy else {}
    gpus = {"nvidia.com/gpu": "4"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "ml-locality",
                     "uid": "6a0f3c2e-9d41-4b7a-8e55-0c1d2e3f4a5b", "labels": labels},
        "spec": {
            "containers": [
                {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                 "resources": {"limits": gpus, "requests": gpus}}
            ]
        },
    }  # fmt: skip


@pytest.fixture(scope="module")
def counters(
    kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Allocations]]:
    """Two DGX H100s alike but for their counters: HOT allocates 90% remote, COOL 0%."""
    tmp = tmp_path_factory.mktemp(f"locality-{secrets.token_hex(3)}")
    # A kubelet that aligns (here single-numa-node): on `none` it picks no NUMA node, so the
    # extender scores every node 0 and there is nothing to lower.
    config = tmp / "kubelet.yaml"
    config.write_text("topologyManagerPolicy: single-numa-node\ntopologyManagerScope: container\n")
    added: list[str] = []
    moving: dict[str, Allocations] = {}
    try:
        for node, remote in ((HOT, 0.9), (COOL, 0.0)):
            sysfs = machines.build("dgx-h100", tmp / node)
            moving[node] = Allocations(sysfs, remote)  # before its agent's first read
            done = cluster_cli(
                "add-node", node, "--sysfs", str(sysfs), "--memory", "2063937144Ki",
                "--kubelet-config", str(config),
            )  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            added.append(node)
        patch_policies(
            kubectl,
            {
                "locality-e2e.yaml": "apiVersion: topoplace.io/v1alpha1\nkind: PlacementPolicy\n"
                f"metadata:\n  name: {POLICY}\nspec:\n  placement:\n    remoteAccessWeight: 100\n"
            },
        )
        yield moving
    finally:
        patch_policies(kubectl, {"locality-e2e.yaml": None}, wait=False)
        for node in added:
            cluster_cli("remove-node", node)


def test_a_node_publishing_remote_access_loses_the_extenders_score(
    cluster: Cluster, kubectl: Kubectl, counters: dict[str, Allocations]
) -> None:
    def published() -> dict[str, int | None] | None:
        for node in counters.values():
            node.step()  # the workload goes on allocating while the agents measure
        seen = {n: published_percent(kubectl, n) for n in (HOT, COOL)}
        return seen if seen == {HOT: 90, COOL: 0} else None

    # A window of the agent's (60 s) closes, then its NodeResourceTopology pass (60 s) runs.
    seen = procs.wait_for(published, "the agents publishing 90% and 0% remote access", timeout=300)
    plain = prioritize(cluster, kubectl, four_gpu_pod(None))
    weighted = prioritize(cluster, kubectl, four_gpu_pod(POLICY))
    assert plain[HOT] == plain[COOL] > 0, plain  # otherwise equal
    # 10 × 100/100 × 90/100 = 9 points off the node that allocates remotely.
    assert weighted == {HOT: plain[HOT] - 9, COOL: plain[COOL]}, weighted
    print(f"\npublished {seen}; prioritize without a weight {plain}, with weight 100 {weighted}")
