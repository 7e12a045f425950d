"""The real Topology Manager admits what we mutate, and gives it what the policy promised:
exclusive CPUs (and, under the Static memory manager, memory) on the NUMA nodes of the GPUs
and NICs the device manager handed out. The same workload without the policy label runs on
the shared CPU pool, and the audit says so."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from agent.sources.cpu import parse_cpulist
from common.vocabulary import Label
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.e2e.helpers import REPO, node_labels, wait_bound, wait_pods
from tests.e2e.kubelet_truth import (
    audit,
    cpu_manager_state,
    numa_of_cpus,
    pod_resources,
    wait_admitted_or_refused,
)

EXAMPLES = REPO / "examples" / "pods"


def _example(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / name).read_text())


def _pod(name: str, template: dict[str, Any]) -> dict[str, Any]:
    meta = template.get("metadata", {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(meta.get("labels", {}))},
        "spec": copy.deepcopy(template["spec"]),
    }


def ddp_master() -> dict[str, Any]:
    """The PyTorchJob example's Master: 8 GPUs, policy ddp-hgx-full-node."""
    job = _example("pytorchjob.yaml")
    return _pod("ddp-master", job["spec"]["pytorchReplicaSpecs"]["Master"]["template"])


def finetune_half() -> dict[str, Any]:
    """The multi-container example (single-numa-partial) at a size one NUMA node of the
    single-numa-node DGX A100 holds: its 4 GPUs and 300Gi fit no node (the README's
    `explain` example), so 2 GPUs and 100Gi here."""
    pod = _example("multi-container-pod.yaml")
    pod["metadata"] = {"name": "finetune", "labels": pod["metadata"]["labels"]}
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    limits["nvidia.com/gpu"], limits["memory"] = 2, "100Gi"
    return pod


def assert_aligned(cluster: Cluster, kubectl: Kubectl, namespace: str, pod: str) -> int:
    """Every GPU container has exclusive CPUs on its devices' NUMA nodes; returns how many."""
    node = kubectl.json("get", "pod", pod, "-n", namespace)["spec"]["nodeName"]
    static_memory = node_labels(kubectl, node).get(Label.MEMORY_MANAGER_POLICY) == "Static"
    checked = 0
    for c in pod_resources(cluster, node, namespace, pod).containers:
        gpus = [d for d in c.devices if d.resource_name == "nvidia.com/gpu"]
        if not gpus:
            continue
        device_numa = {n for d in c.devices for n in d.numa_nodes}
        where = f"{namespace}/{pod}/{c.name} on {node}"
        assert c.cpu_ids, f"{where}: no exclusive CPUs"
        assert numa_of_cpus(cluster, node, c.cpu_ids) <= device_numa, (where, c.cpu_ids)
        if static_memory:
            blocks = [m for m in c.memory if m.memory_type == "memory"]
            assert blocks, f"{where}: no memory pinned by the Static memory manager"
            assert all(set(m.numa_nodes) <= device_numa for m in blocks), (where, blocks)
        checked += 1
    return checked


@pytest.mark.parametrize(
    "workload", [ddp_master, finetune_half], ids=["ddp-hgx-full-node", "single-numa-partial"]
)
def test_the_kubelet_admits_a_mutated_pod_and_aligns_it(
    cluster: Cluster,
    kubectl: Kubectl,
    namespace: str,
    create: Callable[..., Any],
    workload: Callable[[], dict[str, Any]],
) -> None:
    pod = workload()
    name = pod["metadata"]["name"]
    create(pod, namespace)
    node = wait_bound(kubectl, namespace, name)
    verdict = wait_admitted_or_refused(kubectl, namespace, name)
    assert verdict == ("Running", ""), (node, verdict)
    assert assert_aligned(cluster, kubectl, namespace, name) == 1


def test_the_inference_deployment_runs_aligned(
    cluster: Cluster, kubectl: Kubectl, namespace: str
) -> None:
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "inference-deployment.yaml"))
    found = wait_pods(kubectl, namespace, "topoplace.io/policy=inference", 2)
    for pod in found:
        name = pod["metadata"]["name"]
        wait_bound(kubectl, namespace, name)
        assert wait_admitted_or_refused(kubectl, namespace, name) == ("Running", "")
        assert assert_aligned(cluster, kubectl, namespace, name) == 1


def test_the_unmutated_twin_runs_on_the_shared_pool_and_the_audit_says_so(
    cluster: Cluster, kubectl: Kubectl, namespace: str, create: Callable[..., Any]
) -> None:
    deployment = _example("inference-deployment.yaml")
    twin = _pod("twin", deployment["spec"]["template"])
    del twin["metadata"]["labels"]["topoplace.io/policy"]
    twin["spec"]["nodeSelector"] = {"node.kubernetes.io/instance-type": "dgx-h100"}
    created = create(twin, namespace)
    assert '"qosClass": "Burstable"' in created.stdout
    node = wait_bound(kubectl, namespace, "twin")
    assert wait_admitted_or_refused(kubectl, namespace, "twin") == ("Running", "")
    containers = pod_resources(cluster, node, namespace, "twin").containers
    (server,) = [c for c in containers if c.name == "vllm"]
    assert not server.cpu_ids  # no exclusive CPUs: the shared pool
    uid = kubectl.json("get", "pod", "twin", "-n", namespace)["metadata"]["uid"]
    assert uid not in cpu_manager_state(cluster, node).get("entries", {})
    row = audit(cluster, node)[(namespace, "twin", server.name)]
    assert row["verdict"] == "shared-cpus", row


def expected_verdict(cluster: Cluster, node: str, container: Any, exclusive: set[int]) -> str:
    """The audit's verdict, worked out from the kubelet's own records alone: its CPU manager
    checkpoint (exclusive CPUs) and PodResources (devices with NUMA nodes, pinned memory)."""
    gpu_numa = {n for d in container.devices if d.resource_name == "nvidia.com/gpu"
                for n in d.numa_nodes}  # fmt: skip
    if not exclusive:
        return "shared-cpus"
    if not numa_of_cpus(cluster, node, tuple(exclusive)) & gpu_numa:
        return "cpus-remote"
    return "aligned-or-nic-or-memory"


def plain(gpus: int, cpu: int, memory: str) -> dict[str, Any]:
    """A Guaranteed pod that names no policy."""
    limits = {"cpu": str(cpu), "memory": memory, "nvidia.com/gpu": gpus}
    container = {"name": "trainer", "image": "busybox:1", "resources": {"limits": limits}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {"containers": [container]}}


def test_the_audit_is_the_kubelets_truth_on_every_gpu_node(
    cluster: Cluster, kubectl: Kubectl, namespace: str, create: Callable[..., Any]
) -> None:
    """Mutated, plain Guaranteed and Burstable GPU pods on every GPU node; each audit
    verdict follows from cpu_manager_state and PodResources, which agree with each other."""
    twin = _pod("burstable", _example("inference-deployment.yaml")["spec"]["template"])
    del twin["metadata"]["labels"]["topoplace.io/policy"]
    pods = {
        "dgx-h100-a": [ddp_master()],
        "dgx-h100-b": [plain(2, 8, "16Gi"), twin],
        "dgx-a100-nps4": [finetune_half()],
        "pcie-l40s": [plain(1, 4, "8Gi")],
    }
    gpu_nodes = list(pods)
    for node, objs in pods.items():
        for i, obj in enumerate(objs):
            obj["metadata"]["name"] = obj["metadata"].get("name") or f"plain-{node}-{i}"
            obj["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
            create(obj, namespace)
    for pod in kubectl.json("get", "pods", "-n", namespace)["items"]:
        name = pod["metadata"]["name"]
        assert wait_admitted_or_refused(kubectl, namespace, name) == ("Running", ""), name

    judged = 0
    for node in gpu_nodes:
        rows = audit(cluster, node)
        entries = cpu_manager_state(cluster, node).get("entries", {})
        for pod in kubectl.json("get", "pods", "-n", namespace)["items"]:
            if pod["spec"]["nodeName"] != node:
                continue
            name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
            for c in pod_resources(cluster, node, namespace, name).containers:
                if not any(d.resource_name == "nvidia.com/gpu" for d in c.devices):
                    continue
                checkpoint = set(parse_cpulist(entries.get(uid, {}).get(c.name, "")))
                assert checkpoint == set(c.cpu_ids), (node, name, c.name)  # they agree
                row = rows[(namespace, name, c.name)]
                expected = expected_verdict(cluster, node, c, checkpoint)
                if expected == "aligned-or-nic-or-memory":
                    assert row["verdict"] in ("aligned", "nic-far", "memory-remote"), row
                else:
                    assert row["verdict"] == expected, row
                judged += 1
    assert judged == len(gpu_nodes) + 1
