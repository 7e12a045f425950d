"""Which workload a pod belongs to, and where a workload's pods run. (pure)

A pod's workload is read from the label its controller puts on it (WORKLOAD_POD_LABELS, the
table keepTogether's pod affinity uses too). A LeaderWorkerSet is kept together one group at
a time (`exclusive-topology`), so each group is a workload of its own here, `<name>/<index>`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from webhook.workloads.together import WORKLOAD_POD_LABELS

__all__ = [
    "LWS_GROUP_LABEL",
    "PLACED_SELECTOR",
    "WorkloadRef",
    "by_workload",
    "placed_on",
    "placement",
    "placements",
    "workload_of",
]

LWS_GROUP_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-index"
# What the scheduler counts as placed: bound to a node and not finished. The field selector
# asks the API server for those; placed_on checks again, for servers that ignore it.
_DONE: Final = ("Succeeded", "Failed")
PLACED_SELECTOR: Final = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True, slots=True, order=True)
class WorkloadRef:
    namespace: str
    kind: str
    name: str


def workload_of(pod: Mapping[str, Any]) -> WorkloadRef | None:
    """The workload that made `pod`, or None for a pod no known controller labelled."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if not isinstance(labels, Mapping):
        return None
    for kind, key in WORKLOAD_POD_LABELS.items():
        name = labels.get(key)
        if not isinstance(name, str) or not name:
            continue
        group = labels.get(LWS_GROUP_LABEL) if kind == "LeaderWorkerSet" else None
        if isinstance(group, str) and group:
            name = f"{name}/{group}"
        return WorkloadRef(str(meta.get("namespace") or "default"), kind, name)
    return None


def placed_on(pod: Mapping[str, Any]) -> str | None:
    """The node a pod holds its place on, or None (not bound yet, or finished)."""
    node = (pod.get("spec") or {}).get("nodeName")
    if not isinstance(node, str) or not node:
        return None
    if (pod.get("status") or {}).get("phase") in _DONE:
        return None
    return node


def placement(pod: Mapping[str, Any]) -> tuple[WorkloadRef, str] | None:
    """(its workload, its node) for a placed pod of a workload; None for any other pod."""
    ref, node = workload_of(pod), placed_on(pod)
    return (ref, node) if ref is not None and node is not None else None


def by_workload(placed: Iterable[tuple[WorkloadRef, str]]) -> dict[WorkloadRef, list[str]]:
    """The node of each placed pod, grouped by its workload."""
    out: dict[WorkloadRef, list[str]] = {}
    for ref, node in placed:
        out.setdefault(ref, []).append(node)
    return out


def placements(pods: Iterable[Mapping[str, Any]]) -> dict[WorkloadRef, list[str]]:
    """The node of each placed pod, by workload; pods of no workload are left out."""
    return by_workload(p for pod in pods if (p := placement(pod)) is not None)
