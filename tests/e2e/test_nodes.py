"""The simulated nodes look to the scheduler as kubelet-run nodes do: Ready, untainted, with
the capacity their device plugins would report; and a Node anyone registers gets no taint
that only exists because no kubelet runs here."""

from __future__ import annotations

import json

from common.vocabulary import Label
from e2e.cluster import Cluster
from e2e.kube import Kubectl


def test_simulated_nodes_are_ready_untainted_and_report_their_devices(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    for node in cluster.nodes:
        obj = kubectl.json("get", "node", node)
        ready = {c["type"]: c["status"] for c in obj["status"]["conditions"]}["Ready"]
        assert ready == "True", node
        assert not obj["spec"].get("taints"), (node, obj["spec"].get("taints"))
        gpus = obj["metadata"]["labels"].get(Label.GPUS, "0")
        assert obj["status"]["allocatable"].get("nvidia.com/gpu", "0") == gpus, node


def test_a_node_registered_by_hand_gets_no_not_ready_taint(kubectl: Kubectl) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "registered-by-hand", "labels": {"kubernetes.io/os": "linux"}},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "by hand"}
            ],
        },
    }
    kubectl("create", "-f", "-", input=json.dumps(node))
    try:
        assert not kubectl.json("get", "node", "registered-by-hand")["spec"].get("taints")
    finally:
        kubectl("delete", "node", "registered-by-hand")
