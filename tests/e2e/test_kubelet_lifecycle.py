"""What a kubelet's restart and a kubelet's loss do to what Topoplace shows.

Restart: running pods keep their exclusive CPUs (the CPU manager's checkpoint), the audit
reads the same, and the agent writes nothing to the Node. Loss: node-lifecycle marks the
Node NotReady and taints it unreachable, kube-scheduler sends nothing there, and `explain`
says NotReady for it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl, get_url
from e2e.nodes.start import node_procs
from tests.agent.discovery import machines
from tests.e2e.helpers import (
    cluster_cli,
    events,
    explain,
    node_writes,
    training_pod,
    wait_bound,
)
from tests.e2e.kubelet_truth import audit, pod_resources, wait_admitted_or_refused


def _conditions(kubectl: Kubectl, node: str) -> dict[str, str]:
    obj = kubectl.json("get", "node", node)
    return {c["type"]: c["status"] for c in obj["status"]["conditions"]}


def test_a_kubelet_restart_keeps_exclusive_cpus_and_the_agent_writes_nothing(
    cluster: Cluster, kubectl: Kubectl, namespace: str, create: Callable[..., Any]
) -> None:
    node = "dgx-h100-b"
    pod = training_pod("steady", "inference", 2)
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    create(pod, namespace)
    assert wait_bound(kubectl, namespace, "steady") == node
    assert wait_admitted_or_refused(kubectl, namespace, "steady") == ("Running", "")
    before = pod_resources(cluster, node, namespace, "steady")
    audit_before = audit(cluster, node)[(namespace, "steady", "trainer")]
    writes = node_writes(cluster, node)
    kubelet, *_ = node_procs(node)
    pid_before = procs.running(cluster.state)[kubelet]

    cluster.restart(kubelet)
    port = cluster.nodes[node]["kubelet_healthz_port"]
    procs.wait_for(
        lambda: get_url(f"http://127.0.0.1:{port}/healthz") == "ok",
        f"the restarted kubelet of {node} healthy",
        watch=lambda: procs.check_alive(cluster.state, kubelet),
    )
    assert procs.running(cluster.state)[kubelet] != pid_before
    after = procs.wait_for(
        lambda: pod_resources(cluster, node, namespace, "steady"),
        "the restarted kubelet answering PodResources for the pod",
    )
    assert [sorted(c.cpu_ids) for c in after.containers] == [
        sorted(c.cpu_ids) for c in before.containers
    ]
    assert after.containers[0].cpu_ids, "exclusive CPUs survive the restart (checkpoint)"
    assert audit(cluster, node)[(namespace, "steady", "trainer")] == audit_before
    assert _conditions(kubectl, node)["Ready"] == "True"
    assert node_writes(cluster, node) == writes


def test_a_lost_kubelet_makes_its_node_not_ready_and_explain_says_so(
    cluster: Cluster,
    kubectl: Kubectl,
    namespace: str,
    create: Callable[..., Any],
    tmp_path: Path,
) -> None:
    node = "lost-node"
    sysfs = machines.build("pcie-server", tmp_path / "sys")
    # A node the inference policy would take, so that NotReady is what keeps the pod off.
    config = tmp_path / "kubelet.yaml"
    config.write_text(
        "cpuManagerPolicy: static\nreservedSystemCPUs: '0'\ntopologyManagerPolicy: restricted\n"
    )
    added = cluster_cli(
        "add-node", node, "--sysfs", str(sysfs), "--memory", "256Gi",
        "--kubelet-config", str(config),
    )  # fmt: skip
    assert added.returncode == 0, added.stdout + added.stderr
    try:
        kubelet, *_ = node_procs(node)
        procs.stop(cluster.state, kubelet)
        procs.wait_for(
            lambda: _conditions(kubectl, node)["Ready"] == "Unknown",
            f"node-lifecycle marking {node} NotReady (20 s grace)",
            timeout=90,
        )
        taints = procs.wait_for(
            lambda: kubectl.json("get", "node", node)["spec"].get("taints"),
            f"the unreachable taint on {node}",
        )
        assert {t["key"] for t in taints} == {"node.kubernetes.io/unreachable"}

        pod = training_pod("after-loss", "inference", 1)
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        create(pod, namespace)
        procs.wait_for(
            lambda: events(kubectl, namespace, "after-loss", "FailedScheduling"),
            "kube-scheduler refusing the lost node",
        )
        assert not kubectl.json("get", "pod", "after-loss", "-n", namespace)["spec"].get("nodeName")
        verdicts = {n["node"]: n for n in explain(cluster, pod, namespace, tmp_path)["nodes"]}
        assert not verdicts[node]["fits"]
        assert verdicts[node]["reason"].startswith("node NotReady"), verdicts[node]
    finally:
        removed = cluster_cli("remove-node", node)
    assert removed.returncode == 0, removed.stderr
