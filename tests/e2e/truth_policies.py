"""Pods mutated by policies that allow only `single-numa-node` or `restricted` kubelets, left
to the default scheduler: the webhook's required node affinity must keep each one off every
node whose kubelet would refuse it. So each ends Running, or stays Pending with the
scheduler's reason, never Failed. One at a time, on an otherwise idle fleet: a refusal is
then the node's shape, not another pod's load."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.e2e.helpers import events, patch_policies, training_pod
from tests.e2e.truth_fleet import settled_states
from tests.e2e.truth_judges import config_word, kubelet_config, wait_available

__all__ = ["POLICY_CASES", "PolicyRow", "run_policy_pods"]

# Issue 32's example: PIX pairs under an aligning kubelet, Guaranteed, a NIC per GPU.
TRUTH_POLICY = """\
apiVersion: topoplace.io/v1alpha1
kind: PlacementPolicy
metadata:
  name: truth-numa
spec:
  placement:
    gpuNicLink: PIX
    topologyManagerPolicies: [single-numa-node, restricted]
  resources:
    guaranteed: true
    cpuPerGpu: 12
    memoryPerGpu: 96Gi
    rdma: {resource: rdma/ib, perGpu: 1}
"""
# Issue 44's example: a policy silent on topologyManagerPolicies still makes the pod
# Guaranteed with a NIC per GPU: its kubelet-shape terms keep it off kubelets that must
# refuse it (an 8-GPU pod with 32 CPUs on a restricted DGX H100), under every policy.
SILENT_POLICY = """\
apiVersion: topoplace.io/v1alpha1
kind: PlacementPolicy
metadata:
  name: truth-silent
spec:
  placement:
    gpuNicPairs: true
  resources:
    guaranteed: true
    cpuPerGpu: 4
    rdma: {resource: rdma/ib, perGpu: 1}
"""
# Issue 51: no GPU-NIC link asked (a Grace pairs none), so only the kubelet-shape terms keep
# a pod off a machine with NUMA nodes without CPUs whose kubelet would refuse it (4 GPUs of a
# GB200 tray span both Graces, their 48 CPUs fit one: `restricted` refuses).
GRACE_POLICY = """\
apiVersion: topoplace.io/v1alpha1
kind: PlacementPolicy
metadata:
  name: truth-grace
spec:
  placement:
    topologyManagerPolicies: [single-numa-node, restricted]
  resources:
    guaranteed: true
    cpuPerGpu: 12
    memoryPerGpu: 96Gi
"""
POLICY_FILE = "truth-numa.yaml"
SILENT_FILE = "truth-silent.yaml"
GRACE_FILE = "truth-grace.yaml"
GPU_COUNTS = (1, 2, 4, 8)
# (policy, GPUs, machine class or None): the test policy twice over (two pods of a size may
# land on different machines), the two shipped policies that allow only aligning kubelets,
# the silent one, and the Grace one on each machine with NUMA nodes without CPUs.
POLICY_CASES: list[tuple[str, int, str | None]] = [
    *(
        (p, g, None)
        for p in ("truth-numa", "truth-numa", "inference", "single-numa-partial", "truth-silent")
        for g in GPU_COUNTS
    ),
    *(("truth-grace", g, "gb200-tray") for g in GPU_COUNTS),
    *(("truth-grace", g, "gh200") for g in (1, 2)),
    *(("truth-grace", g, "cxl-server") for g in (1, 2, 4)),
]


@dataclass(frozen=True)
class PolicyRow:
    name: str
    policy: str
    gpus: int
    node: str  # "" while unbound
    config: str
    phase: str
    reason: str

    def line(self) -> str:
        where = f"{self.node} ({self.config})" if self.node else "-"
        return (
            f"{self.name:<12} {self.policy:<20} {self.gpus} GPU  {self.phase:<8} "
            f"{where:<58} {self.reason}"
        )


@contextmanager
def truth_policy(kubectl: Kubectl) -> Iterator[None]:
    files = {POLICY_FILE: TRUTH_POLICY, SILENT_FILE: SILENT_POLICY, GRACE_FILE: GRACE_POLICY}
    patch_policies(kubectl, dict(files))
    try:
        yield
    finally:
        patch_policies(kubectl, dict.fromkeys(files), wait=False)


def _settle(kubectl: Kubectl, namespace: str, name: str) -> tuple[str, str, str]:
    """(node, phase, reason): Running, Failed (the kubelet's reason and message), or Pending
    unbound with the scheduler's FailedScheduling message."""

    def settled() -> tuple[str, str, str] | None:
        pod = kubectl.json("get", "pod", name, "-n", namespace)
        node, status = pod["spec"].get("nodeName", ""), pod["status"]
        if node and status.get("phase") == "Running":
            return node, "Running", ""
        if status.get("phase") == "Failed":
            why = f"{status.get('reason', '')}: {status.get('message', '')}"
            return node, "Failed", why
        if not node:
            failed = events(kubectl, namespace, name, "FailedScheduling")
            if failed:
                return "", "Pending", failed[-1]["message"]
        return None

    return procs.wait_for(
        settled, f"{namespace}/{name} running, refused or turned away", timeout=180, interval=0.5
    )


def _pod(index: int, policy: str, gpus: int, machine: str | None) -> dict[str, Any]:
    pod = training_pod(f"policy-{index:02d}", policy, gpus, machine=machine)
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    return pod


def run_policy_pods(cluster: Cluster, kubectl: Kubectl, namespace: str) -> list[PolicyRow]:
    rows = []
    with truth_policy(kubectl):
        idle = settled_states(cluster, kubectl)
        for index, (policy, gpus, machine) in enumerate(POLICY_CASES):
            pod = _pod(index, policy, gpus, machine)
            name = pod["metadata"]["name"]
            kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod))
            node, phase, reason = _settle(kubectl, namespace, name)
            config = config_word(kubelet_config(cluster, node)) if node in cluster.nodes else ""
            rows.append(PolicyRow(name, policy, gpus, node, config, phase, reason))
            kubectl.run("delete", "pod", name, "-n", namespace, "--wait=true", timeout=120)
            if node in idle:
                wait_available(kubectl, node, idle[node], "its idle state")
    return rows
