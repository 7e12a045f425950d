"""A small fleet in 2 blocks x 2 sub-blocks, as the agents label it, and workload pods as their
controllers create them (the labels each controller puts on its pods)."""

from __future__ import annotations

from typing import Any

from common.vocabulary import Label

__all__ = ["BLOCKS", "node", "node_labels", "pod"]

# node -> (tier-1 sub-block, tier-2 block); tier 3 is one cluster for all.
BLOCKS = {
    "w1": ("sb-a1", "block-a"),
    "w2": ("sb-a1", "block-a"),
    "w3": ("sb-a2", "block-a"),
    "w4": ("sb-b1", "block-b"),
    "w5": ("sb-b2", "block-b"),
}


def node(name: str) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name}
    if name in BLOCKS:
        sub, block = BLOCKS[name]
        labels |= {
            Label.NETWORK_TIER_1: sub,
            Label.NETWORK_TIER_2: block,
            Label.NETWORK_TIER_3: "cluster-1",
        }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


def node_labels(*names: str) -> dict[str, dict[str, str]]:
    return {n: node(n)["metadata"]["labels"] for n in names}


def pod(
    name: str,
    node_name: str | None,
    labels: dict[str, str],
    *,
    phase: str = "Running",
    namespace: str = "ml",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "trainer", "image": "trainer:1"}]}
    if node_name is not None:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": {"topoplace.io/policy": "ddp", **labels},
        },
        "spec": spec,
        "status": {"phase": phase},
    }
