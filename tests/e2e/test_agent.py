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

from common.vocabulary import TOPOLOGY_ANNOTATION, is_owned_key
from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from e2e.topoplace.install import wait_agent_ready
from tests.e2e.helpers import node_labels, node_writes

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


def agent_kubectl(cluster: Cluster, node: str) -> Kubectl:
    """kubectl holding the agent's token for `node` (bound to the DaemonSet pod there)."""
    return Kubectl(
        cluster.bin / "kubectl", cluster.state / "kubeconfigs" / f"agent-{node}.kubeconfig"
    )


def test_labels_equal_discover_on_every_node(cluster: Cluster, kubectl: Kubectl) -> None:
    for node, paths in cluster.nodes.items():
        expected = discover(paths)
        obj = kubectl.json("get", "node", node)
        labels = {k: v for k, v in obj["metadata"]["labels"].items() if is_owned_key(k)}
        assert labels == expected["labels"], node
        annotations = obj["metadata"].get("annotations", {})
        assert annotations[TOPOLOGY_ANNOTATION] == expected["annotations"][TOPOLOGY_ANNOTATION]


def test_a_restart_on_unchanged_hardware_writes_nothing(cluster: Cluster) -> None:
    node = "dgx-h100-a"
    before = node_writes(cluster, node)
    assert before >= 1, "the agent's first labelling should be in the audit log"
    cluster.restart(f"agent-{node}")
    wait_agent_ready(cluster, node, cluster.nodes[node]["metrics_port"])  # type: ignore[arg-type]
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


def test_cleanup_removes_every_owned_key_and_the_agent_restores_them(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    node = "cpu-vm"
    kubeconfig = cluster.state / "kubeconfigs" / f"agent-{node}.kubeconfig"
    before = node_labels(kubectl, node)
    cluster.stop(f"agent-{node}")
    try:
        subprocess.run(
            [AGENT, "cleanup", f"--node-name={node}", f"--kubeconfig={kubeconfig}"],
            check=True,
            capture_output=True,
            text=True,
        )
        obj = kubectl.json("get", "node", node)
        assert not [k for k in obj["metadata"]["labels"] if is_owned_key(k)]
        assert not [k for k in obj["metadata"].get("annotations", {}) if is_owned_key(k)]
        assert obj["metadata"]["labels"]["kubernetes.io/hostname"] == node  # others untouched
    finally:
        cluster.start(f"agent-{node}")
    procs.wait_for(
        lambda: node_labels(kubectl, node) == before,
        f"the agent of {node} relabelling it after cleanup",
    )
