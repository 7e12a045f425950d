"""The parts of a Node object that decide whether a pod fits: a small, comparable view.

The webhook's node cache keeps only these (never the whole object with its image list and
managed fields), and `explain` reads `kubectl get nodes -o yaml` output into them.
"""

from __future__ import annotations

import collections
import functools
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from common.vocabulary import TOPOLOGY_ANNOTATION
from webhook.placement_model.filters.tolerations import Taint, parse_taints
from webhook.placement_model.numa_shape import NumaShape, load_topology, numa_shape
from webhook.placement_model.pairing import Pairing, pairing_of
from webhook.placement_model.requests import Amounts, node_allocatable

__all__ = ["NodeError", "NodeView", "node_views", "used_by_node"]


class NodeError(ValueError):
    """A document that is not a Node we can read."""


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    # What pods bound to the node already request (only when read from a live cluster).
    used: Mapping[str, int] = field(default_factory=dict)
    pods: int = 0
    # False for a hand-written Node without status.allocatable: its resources go unchecked
    # (kube-scheduler would see none at all; every kubelet reports them).
    resources_known: bool = True
    # CPUs, GPUs and NICs per NUMA node, from the agent's topology annotation.
    numa: NumaShape | None = None
    # GPU↔NIC partners and RDMA resources per NUMA node, from the same annotation.
    pairing: Pairing | None = None

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> NodeView:
        metadata = _v if isinstance(_v := obj.get("metadata"), dict) else {}
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            raise NodeError("a Node without metadata.name")
        raw_labels = metadata.get("labels") or {}
        if not isinstance(raw_labels, dict):
            raise NodeError(f"node {name}: metadata.labels is not a map")
        # Interned: thousands of nodes repeat the same keys and values.
        labels = {sys.intern(str(k)): sys.intern(str(v)) for k, v in raw_labels.items()}
        spec = _v if isinstance(_v := obj.get("spec"), Mapping) else {}
        numa, pairing = _hardware((metadata.get("annotations") or {}).get(TOPOLOGY_ANNOTATION))
        status = _v if isinstance(_v := obj.get("status"), Mapping) else {}
        return cls(
            name=name,
            labels=labels,
            allocatable=node_allocatable(status),
            taints=parse_taints(spec),
            unschedulable=spec.get("unschedulable") is True,
            resources_known="allocatable" in status,
            numa=numa,
            pairing=pairing,
        )


@functools.lru_cache(maxsize=512)
def _parsed(annotation: str) -> tuple[NumaShape | None, Pairing | None]:
    topo = load_topology(annotation)
    return numa_shape(topo), pairing_of(topo)


def _hardware(annotation: Any) -> tuple[NumaShape | None, Pairing | None]:
    """The annotation's shape and pairing; alike machines write the same text, so a fleet of
    a few machine classes parses a few annotations, and their nodes share the frozen results."""
    if isinstance(annotation, str):
        return _parsed(annotation)
    topo = load_topology(annotation)
    return numa_shape(topo), pairing_of(topo)


def node_views(docs: Iterable[Any]) -> list[NodeView]:
    """Nodes from YAML documents: Node objects, or Lists of them (`kubectl get nodes -o yaml`)."""
    views: list[NodeView] = []
    for index, doc in enumerate(docs, start=1):
        if not isinstance(doc, dict):
            raise NodeError(f"document {index} is not an object")
        kind = doc.get("kind")
        if kind in ("List", "NodeList"):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise NodeError(f"document {index}: items is not a list")
            views.extend(_one(item, f"document {index} item {i}") for i, item in enumerate(items))
        else:
            views.append(_one(doc, f"document {index}"))
    counts = collections.Counter(v.name for v in views)
    duplicates = sorted(n for n, c in counts.items() if c > 1)
    if duplicates:
        raise NodeError(f"node(s) listed twice: {', '.join(duplicates)}")
    return views


def _one(doc: Any, where: str) -> NodeView:
    if not isinstance(doc, dict) or doc.get("kind") != "Node":
        kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
        raise NodeError(f"{where} is a {kind}, not a Node (give `kubectl get nodes -o yaml`)")
    try:
        return NodeView.from_object(doc)
    except NodeError as exc:
        raise NodeError(f"{where}: {exc}") from None


def used_by_node(pods: Iterable[tuple[str, Amounts]]) -> dict[str, tuple[Amounts, int]]:
    """(node name, pod requests) pairs summed per node: (requests, pod count)."""
    out: dict[str, tuple[Amounts, int]] = {}
    for node, requests in pods:
        total, count = out.get(node, ({}, 0))
        for name, value in requests.items():
            total[name] = total.get(name, 0) + value
        out[node] = (total, count + 1)
    return out
