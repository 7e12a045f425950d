"""The agent through the real API server: its labels are what `discover` says, a restart on
unchanged hardware writes nothing, and RBAC plus our admission policy hold it to its own
node's topoplace labels."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.vocabulary import TOPOLOGY_ANNOTATION, is_owned_key
from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from e2e.topoplace.containers import kill_container, pod_token_kubeconfig, restart_count
from e2e.topoplace.install import agent_pods, wait_agents_ready
from tests.e2e.helpers import REPO, node_labels, node_writes

AGENT = str(Path(sys.executable).with_name("topoplace-agent"))


def discover(paths: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [
            AGENT,
            "discover",
            f"--sysfs-root={paths['sysfs']}",
            f"--dataset-root={paths['datasets']}",
            f"--kubelet-config={paths['kubelet_config']}",
            f"--kubelet-config-dir={paths['kubelet_config_dir']}",
            "--no-nvml",
            # `run` asks the kubelet which NICs each RDMA resource holds (rdma-resource-nics).
            f"--pod-resources-socket={paths['pod_resources_socket']}",
            "--output=json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def agent_kubeconfig(cluster: Cluster, node: str) -> Path:
    """The agent's identity on `node`: a token bound to the DaemonSet pod there, as the
    kubelet projects it."""
    pod = agent_pods(cluster.kubectl)[node]["metadata"]["name"]
    return pod_token_kubeconfig(
        cluster.kubectl,
        server=cluster.info["server"],
        ca=Path(cluster.info["ca"]),
        sa="topoplace-agent",
        pod=pod,
        path=cluster.state / "kubeconfigs" / f"agent-{node}.kubeconfig",
    )


def agent_kubectl(cluster: Cluster, node: str) -> Kubectl:
    return Kubectl(cluster.bin / "kubectl", agent_kubeconfig(cluster, node))


def test_labels_equal_discover_on_every_node(cluster: Cluster, kubectl: Kubectl) -> None:
    for node, paths in cluster.nodes.items():
        expected = discover(paths)
        obj = kubectl.json("get", "node", node)
        labels = {k: v for k, v in obj["metadata"]["labels"].items() if is_owned_key(k)}
        assert labels == expected["labels"], node
        annotations = obj["metadata"].get("annotations", {})
        assert annotations[TOPOLOGY_ANNOTATION] == expected["annotations"][TOPOLOGY_ANNOTATION]


def test_a_crashed_agent_is_restarted_by_its_kubelet_and_writes_nothing(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    node = "dgx-h100-a"
    before = node_writes(cluster, node)
    assert before >= 1, "the agent's first labelling should be in the audit log"
    pod = agent_pods(kubectl)[node]["metadata"]["name"]
    restarts = kill_container(kubectl, "topoplace-system", pod, "agent")
    procs.wait_for(
        lambda: restart_count(agent_pods(kubectl)[node], "agent") == restarts + 1,
        f"the kubelet of {node} restarting the killed agent container",
    )
    wait_agents_ready(kubectl, [node])  # Ready again: its first reconcile is done
    assert agent_pods(kubectl)[node]["metadata"]["name"] == pod  # the same pod, restarted
    assert node_writes(cluster, node) == before


@pytest.mark.parametrize(
    ("what", "args"),
    [
        (
            "another node's labels",
            ["label", "node", "dgx-h100-b", "topoplace.io/gpus=0", "--overwrite"],
        ),
        (
            "a label outside the agent's prefixes on its own node",
            ["label", "node", "dgx-h100-a", "example.com/team=ml"],
        ),
        ("its own node's taints", ["taint", "node", "dgx-h100-a", "topoplace.io/x=y:NoSchedule"]),
        ("Secrets", ["get", "secrets", "-n", "topoplace-system"]),
        ("pods, which it may only read", ["delete", "pod", "x", "-n", "topoplace-system"]),
        ("a ConfigMap", ["create", "configmap", "x", "-n", "topoplace-system"]),
    ],
)
def test_the_agent_token_is_refused_beyond_its_own_labels(
    cluster: Cluster, what: str, args: list[str]
) -> None:
    done = agent_kubectl(cluster, "dgx-h100-a").run(*args, check=False)
    assert done.returncode != 0, f"the agent could change {what}: {done.stdout}"
    assert "forbidden" in done.stderr.lower() or "denied" in done.stderr.lower(), done.stderr


def test_the_agent_token_may_set_its_own_labels(cluster: Cluster, kubectl: Kubectl) -> None:
    own = agent_kubectl(cluster, "dgx-h100-a")
    own("annotate", "node", "dgx-h100-a", "topoplace.io/e2e-probe=1")
    own("annotate", "node", "dgx-h100-a", "topoplace.io/e2e-probe-")


def cleanup_job(node: str) -> dict[str, Any]:
    """The per-node cleanup Job exactly as docs/install.md gives it."""
    text = (REPO / "docs" / "install.md").read_text()
    block = text.split("Save as `cleanup-job.yaml`:", 1)[1].split("```yaml", 1)[1].split("```")[0]
    return yaml.safe_load(block.replace("NODE", node))


def test_the_documented_cleanup_job_removes_every_owned_key_and_the_agent_restores_them(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    node = "cpu-vm"
    before = node_labels(kubectl, node)
    # Take the agent off the node as an operator would: a NoExecute taint it does not
    # tolerate evicts it, and the DaemonSet controller does not put it back.
    taint = "topoplace.io/e2e-no-agent=true:NoExecute"
    kubectl("taint", "node", node, taint)
    try:
        procs.wait_for(lambda: node not in agent_pods(kubectl), f"the agent pod off {node}")
        # The Job's pod runs our image on that node, with the agent's projected token.
        job = json.loads(
            kubectl("create", "-f", "-", "-o", "json", input=json.dumps(cleanup_job(node)))
        )
        name = job["metadata"]["name"]
        kubectl.run(
            "wait", "--for=condition=complete", f"job/{name}", "-n", "topoplace-system",
            "--timeout=90s", timeout=100,
        )  # fmt: skip
        obj = kubectl.json("get", "node", node)
        assert not [k for k in obj["metadata"]["labels"] if is_owned_key(k)]
        assert not [k for k in obj["metadata"].get("annotations", {}) if is_owned_key(k)]
        assert obj["metadata"]["labels"]["kubernetes.io/hostname"] == node  # others untouched
        kubectl("delete", "job", name, "-n", "topoplace-system", "--cascade=foreground")
    finally:
        kubectl("taint", "node", node, f"{taint.split('=')[0]}:NoExecute-")
    procs.wait_for(
        lambda: node_labels(kubectl, node) == before,
        f"the agent of {node} relabelling it after cleanup",
    )
