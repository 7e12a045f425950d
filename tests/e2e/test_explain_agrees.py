"""`explain` agrees with the kubelet: pod × node cases, each pod bound by nodeName so that the
kubelet alone decides (its Topology, CPU, memory and device managers), compared with what
`explain` said of that node beforehand. The kubelet is the truth; the table is printed.

A node fragmented by running pods is judged on what each NUMA node has free now (its
NodeResourceTopology, once it shows the pods that run there). One disagreement is known and
kept visible: a GPU pod bound by nodeName to a node without GPUs: the kubelet admits it (it
ignores extended resources its node does not report), while explain, like kube-scheduler,
says it does not fit."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.agent.discovery import machines
from tests.e2e.helpers import cluster_cli, explain, training_pod
from tests.e2e.kubelet_truth import wait_admitted_or_refused
from tests.e2e.nrt_truth import kubelet_free, published

CONTAINER_SCOPE_NODE = "pcie-container-scope"
GI = "Gi"


def guaranteed(name: str, gpus: int, cpu: int, memory: str, containers: int = 1) -> dict:
    """A plain pod (no policy) whose containers are Guaranteed with integer CPUs."""
    limits: dict[str, Any] = {"cpu": str(cpu), "memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": f"c{i}", "image": "busybox:1", "resources": {"limits": dict(limits)}}
                for i in range(containers)
            ],
        },
    }


def burstable(name: str, cpu: int) -> dict:
    pod = guaranteed(name, 0, cpu, "1Gi")
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": str(cpu)}}
    return pod


def policy_pod(name: str, policy: str, gpus: int) -> dict:
    return training_pod(name, policy, gpus)


@dataclass
class Case:
    what: str
    node: str
    pod: dict[str, Any]
    known: str = ""  # a disagreement we know of, and why
    before: list[dict[str, Any]] = field(default_factory=list)  # pods to run there first


CASES = [
    Case("inference, 2 GPUs", "dgx-h100-a", policy_pod("inf-2", "inference", 2)),
    Case("ddp full node, 8 GPUs", "dgx-h100-a", policy_pod("ddp-8", "ddp-hgx-full-node", 8)),
    Case("8 GPUs, 96 CPUs (restricted)", "dgx-h100-a", guaranteed("g8-c96", 8, 96, "100Gi")),
    Case("8 GPUs, 192 CPUs (restricted)", "dgx-h100-a", guaranteed("g8-c192", 8, 192, "100Gi")),
    Case("inference asks 8 GPUs", "dgx-h100-b", policy_pod("inf-8", "inference", 8)),
    Case("4 GPUs on single-numa-node", "dgx-a100-nps4", guaranteed("g4", 4, 8, "16Gi")),
    Case("2 GPUs on single-numa-node", "dgx-a100-nps4", guaranteed("g2", 2, 8, "16Gi")),
    Case("40 CPUs > one NUMA node", "dgx-a100-nps4", guaranteed("c40", 0, 40, "16Gi")),
    Case("24 CPUs", "dgx-a100-nps4", guaranteed("c24", 0, 24, "16Gi")),
    Case("40 CPUs, Burstable", "dgx-a100-nps4", burstable("c40-burst", 40)),
    Case(
        "single-numa-partial, 2 GPUs",
        "dgx-a100-nps4",
        policy_pod("snp-2", "single-numa-partial", 2),
    ),
    Case("2 × 2 GPUs, scope pod", "dgx-a100-nps4", guaranteed("pod-2x2", 2, 4, "8Gi", 2)),
    Case(
        "2 × 2 GPUs, scope container", CONTAINER_SCOPE_NODE, guaranteed("ctr-2x2", 2, 4, "8Gi", 2)
    ),
    Case("4 GPUs, no topology policy", "pcie-l40s", guaranteed("l40s-4", 4, 8, "16Gi")),
    Case(
        "1 GPU on a CPU-only VM",
        "cpu-vm",
        guaranteed("vm-gpu", 1, 1, "1Gi"),
        known="the kubelet skips an extended resource its node lacks; the scheduler never "
        "binds there, and the container would run without a GPU",
    ),
    Case(
        "2 GPUs, 1 free on each NUMA node",
        "dgx-h100-b",
        guaranteed("frag-2", 2, 8, "16Gi"),
        before=[guaranteed("frag-a", 3, 8, "16Gi"), guaranteed("frag-b", 3, 8, "16Gi")],
    ),
]


@pytest.fixture(scope="module")
def container_scope_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PCIe server (2 GPUs per NUMA node) whose kubelet aligns container by container."""
    tmp = tmp_path_factory.mktemp("scope")
    config = tmp / "kubelet.yaml"
    config.write_text(
        "cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
        "topologyManagerPolicy: single-numa-node\ntopologyManagerScope: container\n"
    )
    sysfs = machines.build("pcie-server", tmp / "sys")
    added = cluster_cli(
        "add-node", CONTAINER_SCOPE_NODE, "--sysfs", str(sysfs), "--memory", "256Gi",
        "--kubelet-config", str(config),
    )  # fmt: skip
    assert added.returncode == 0, added.stdout + added.stderr
    yield CONTAINER_SCOPE_NODE
    cluster_cli("remove-node", CONTAINER_SCOPE_NODE)


def _bound(pod: dict[str, Any], node: str) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["spec"]["nodeName"] = node
    return out


def _kubelet_verdict(kubectl: Kubectl, namespace: str, name: str) -> tuple[bool, str]:
    phase, reason = wait_admitted_or_refused(kubectl, namespace, name)
    return phase == "Running", reason


def _delete(kubectl: Kubectl, namespace: str, *names: str) -> None:
    kubectl("delete", "pod", *names, "-n", namespace, "--grace-period=1", "--wait=true")


def gpus(free: dict[str, dict[str, int]]) -> dict[str, int]:
    """GPUs free per NUMA node: these kubelets run no static CPU manager, so PodResources
    lists no CPUs to compare, and a CPU-only node has no GPU to wait for."""
    return {zone: r["nvidia.com/gpu"] for zone, r in free.items() if r.get("nvidia.com/gpu")}


def test_explain_agrees_with_the_kubelet(
    cluster: Cluster,
    kubectl: Kubectl,
    namespace: str,
    create: Callable[..., Any],
    container_scope_node: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = []
    for case in CASES:
        for pod in case.before:
            create(_bound(pod, case.node), namespace)
            assert _kubelet_verdict(kubectl, namespace, pod["metadata"]["name"])[0]
        # explain reads free capacity: once the agent has published what the kubelet holds
        # (the pods before, or the previous case's pods gone)
        procs.wait_for(
            lambda case=case: (
                gpus(published(kubectl, case.node) or {}) == gpus(kubelet_free(cluster, case.node))
            ),
            f"NodeResourceTopology {case.node} true before {case.what!r}",
        )
        verdicts = explain(cluster, case.pod, namespace, tmp_path)["nodes"]
        said = next(v for v in verdicts if v["node"] == case.node)
        name = case.pod["metadata"]["name"]
        create(_bound(case.pod, case.node), namespace)
        admitted, why = _kubelet_verdict(kubectl, namespace, name)
        rows.append((case, said, admitted, why))
        _delete(kubectl, namespace, name, *(p["metadata"]["name"] for p in case.before))

    table = ["", f"{'case':<34} {'node':<21} {'explain':<8} {'kubelet':<26} agree"]
    for case, said, admitted, why in rows:
        kubelet = "admits" if admitted else f"refuses {why}"
        agree = "yes" if said["fits"] == admitted else f"NO ({case.known or 'unexpected'})"
        table.append(
            f"{case.what:<34} {case.node:<21} {'fits' if said['fits'] else 'no':<8} "
            f"{kubelet:<26} {agree}"
        )
    with capsys.disabled():
        print("\n".join(table))
    assert len(rows) >= 12
    assert {admitted for _, _, admitted, _ in rows} == {True, False}
    refused_by_topology = [r for r in rows if r[3] == "TopologyAffinityError"]
    assert len(refused_by_topology) >= 4, "the Topology Manager itself must refuse some"
    for case, said, admitted, why in rows:
        if case.known:
            assert said["fits"] != admitted, f"{case.what}: they agree now: drop `known`"
        else:
            assert said["fits"] == admitted, (case.what, said, why)
