"""Taints against tolerations, as the scheduler's TaintToleration filter sees them.

Only NoSchedule and NoExecute taints keep a pod off a node (PreferNoSchedule only scores).
A toleration matches a taint when its effect is empty or equal, its key is empty or equal
(an empty key goes with Exists and matches every taint), and its operator holds: Equal (or
empty) compares values, Exists matches any value, Gt/Lt compare integer values.

Gt/Lt (k8s.io/api core/v1 compareNumericValues) read both values as int64 in canonical
decimal form only: no sign but `-`, no leading zero, no `-0`. A toleration `0100` or `+100`,
or a taint `0200`, tolerates nothing, where node affinity's Gt/Lt would read 100 and 200.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.placement_model.filters.selectors import parse_int64

__all__ = [
    "FILTER_EFFECTS",
    "NOT_READY_TAINTS",
    "UNSCHEDULABLE_TAINT",
    "Taint",
    "Toleration",
    "canonical_int64",
    "parse_taints",
    "parse_tolerations",
    "tolerates",
    "untolerated",
]

FILTER_EFFECTS = ("NoSchedule", "NoExecute")
_CANONICAL = re.compile(r"0|-?[1-9][0-9]*")  # content.IsDecimalInteger
# The NodeUnschedulable filter lets a pod onto a cordoned node only if it tolerates this.
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
# The taints node-lifecycle puts on a node whose kubelet reports NotReady or stopped
# reporting at all, and what each means.
NOT_READY_TAINTS = {
    "node.kubernetes.io/not-ready": "its kubelet reports it not ready",
    "node.kubernetes.io/unreachable": "its kubelet stopped posting status",
}


@dataclass(frozen=True, slots=True, order=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        if self.operator == "Exists":
            return True
        if self.operator in ("Gt", "Lt"):
            mine, theirs = canonical_int64(self.value), canonical_int64(taint.value)
            if mine is None or theirs is None:
                return False
            return theirs > mine if self.operator == "Gt" else theirs < mine
        return False


def canonical_int64(text: str) -> int | None:
    """A toleration's or taint's Gt/Lt value: an int64 in canonical decimal form, else None."""
    return parse_int64(text) if _CANONICAL.fullmatch(text) else None


def _text(raw: Mapping[str, Any], key: str) -> str:
    value = raw.get(key)
    return value if isinstance(value, str) else ""


def parse_taints(node_spec: Mapping[str, Any]) -> tuple[Taint, ...]:
    """The node's taints that filter (NoSchedule, NoExecute), sorted, duplicates dropped."""
    raw = node_spec.get("taints") or []
    found = {
        Taint(_text(t, "key"), _text(t, "value"), _text(t, "effect"))
        for t in (raw if isinstance(raw, list) else [])
        if isinstance(t, dict) and t.get("effect") in FILTER_EFFECTS
    }
    return tuple(sorted(found))


def parse_tolerations(pod_spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    raw = pod_spec.get("tolerations") or []
    return tuple(
        Toleration(_text(t, "key"), _text(t, "operator"), _text(t, "value"), _text(t, "effect"))
        for t in (raw if isinstance(raw, list) else [])
        if isinstance(t, dict)
    )


def tolerates(tolerations: Sequence[Toleration], taint: Taint) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


def untolerated(tolerations: Sequence[Toleration], taints: Sequence[Taint]) -> Taint | None:
    """The first filtering taint no toleration matches, or None."""
    for taint in taints:
        if not tolerates(tolerations, taint):
            return taint
    return None
