"""One verdict per node: fits or not, the first failing check in words, the preferred score.

`evaluate` runs the pod's checks (webhook/nodefit/checks.py) on one node; explanation.py
runs them on every node for `explain`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from common.vocabulary import Label
from webhook.nodefit.checks import Check, PodPlan
from webhook.nodefit.kubelet_check import kubelet_note, topology_failure
from webhook.nodefit.pairs_check import PairsVerdict, pairs_verdict
from webhook.nodefit.reasons import AGENT_MISSING, describe, describe_preferred, has_agent_labels
from webhook.placement_model.filters.nodes import NodeView
from webhook.placement_model.filters.selectors import first_failing, parse_int64, term_matches
from webhook.placement_model.filters.tolerations import (
    NOT_READY_TAINTS,
    UNSCHEDULABLE_TAINT,
    Taint,
    tolerates,
    untolerated,
)
from webhook.placement_model.requests import Amounts, format_amount

__all__ = [
    "NodeVerdict",
    "evaluate",
    "failure",
    "with_usage",
]


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    node: str
    fits: bool
    reason: str | None  # the first failing check, in words; None when the pod fits
    check: str | None  # that check's group ("gpu-nic-link", "allocatable nvidia.com/gpu")
    reasons: tuple[str, ...]  # every failing check, in order
    score: int  # sum of the weights of the preferred terms the node matches
    preferred: tuple[str, ...]  # those terms, in words
    # Whether the GPU↔NIC pairs the policy asks for are guaranteed here; None: none asked.
    pairs: PairsVerdict | None = None
    notes: tuple[str, ...] = ()  # what the model could not judge here, in words


def _free(node: NodeView, resource: str) -> tuple[int, int, int]:
    """(free, allocatable, already requested) of a resource on a node."""
    if resource == "pods":
        allocatable, used = node.allocatable.get("pods", 0), node.pods
    else:
        allocatable, used = node.allocatable.get(resource, 0), node.used.get(resource, 0)
    return allocatable - used, allocatable, used


def _resource_reason(check: Check, node: NodeView) -> str | None:
    if not node.resources_known:
        return None
    if check.resource == "pods" and "pods" not in node.allocatable:
        return None  # hand-written nodes often omit it; every kubelet sets it
    free, allocatable, used = _free(node, check.resource)
    if check.need <= free:
        return None
    if check.resource == "pods":
        return f"too many pods: {used} of {allocatable} allowed already bound"
    show = format_amount
    need = show(check.resource, check.need)
    if used:
        return (
            f"free {check.resource} {show(check.resource, max(free, 0))} "
            f"({show(check.resource, allocatable)} allocatable, {show(check.resource, used)} "
            f"requested) < {need}"
        )
    return f"allocatable {check.resource} {show(check.resource, allocatable)} < {need}"


def _affinity_reason(check: Check, node: NodeView, who: str = "node affinity") -> str | None:
    terms = check.terms
    if any(term_matches(t, node.labels, node.name) for t in terms):
        return None
    if not terms:
        return "required node affinity has no non-empty term: it matches no node"

    # The term that came closest: fewest failing expressions, first in order on a tie.
    def failing(term: Any) -> int:
        reqs = term.requirements
        return sum(1 for r in reqs if first_failing((r,), node.labels, node.name) is not None)

    best = min(terms, key=failing)
    req = first_failing(best.requirements, node.labels, node.name)
    if req is None:  # the term does not match, so one requirement fails
        raise ValueError(f"node {node.name}: no failing requirement in a non-matching term")
    text = describe(req, node.labels, node.name, who=who)
    return text + (f" (none of {len(terms)} terms match)" if len(terms) > 1 else "")


def _shape_reason(check: Check, node: NodeView, plan: PodPlan) -> str | None:
    """The policy's kubelet-shape terms leave the node out: the model's reason when its
    kubelet would refuse the pod, else which label the terms miss (an older agent)."""
    closest = _affinity_reason(check, node, who="kubelet shape")
    if closest is None:
        return None
    # The fact that decides it first: a node with too few GPUs needs no Topology Manager.
    have = _node_gpus(node, plan.gpu_resource)
    if have is not None and have < plan.gpus:
        return (
            f"left out by the policy's node affinity: the node has {have} "
            f"{plan.gpu_resource}, the pod asks {plan.gpus}"
        )
    refusal = topology_failure(check, node, plan)
    if refusal is not None:
        return f"left out by the policy's node affinity: {refusal}"
    return closest


def _node_gpus(node: NodeView, resource: str) -> int | None:
    """The node's GPUs: what its kubelet reports allocatable, else the agent's count."""
    if node.resources_known and resource in node.allocatable:
        return node.allocatable[resource]
    counted = parse_int64(node.labels.get(Label.GPUS, "")) if Label.GPUS in node.labels else None
    return counted


def failure(check: Check, node: NodeView, plan: PodPlan) -> str | None:
    """Why `check` fails on `node`, or None when it passes."""
    kind = check.kind
    if kind == "topology":
        return topology_failure(check, node, plan)
    if kind == "name":
        return None if node.name == check.node_name else f"pod is bound to {check.node_name}"
    if kind == "agent":
        return None if has_agent_labels(node.labels) else AGENT_MISSING
    if kind == "policy":
        req = check.requirement
        if req is None:
            raise ValueError(f"policy check {check.group!r} without its requirement")
        if first_failing((req,), node.labels, node.name) is None:
            return None
        return describe(req, node.labels, node.name, who="policy", need=check.need)
    if kind == "affinity":
        return _affinity_reason(check, node)
    if kind == "shape":
        return _shape_reason(check, node, plan)
    if kind == "selector":
        for key, value in check.selector:
            if node.labels.get(key) != value:
                have = node.labels.get(key)
                what = f"{key} is {have}" if have is not None else f"no label {key}"
                return f"{what}; nodeSelector needs {value}"
        return None
    if kind == "cordon":
        cordon = Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule")
        if node.unschedulable and not tolerates(check.tolerations, cordon):
            return "node is cordoned (spec.unschedulable)"
        return None
    if kind == "taints":
        taint = untolerated(check.tolerations, node.taints)
        if taint is None:
            return None
        if taint.key in NOT_READY_TAINTS:  # node-lifecycle's words for a silent kubelet
            return f"node NotReady ({NOT_READY_TAINTS[taint.key]}): taint {taint} not tolerated"
        return f"taint {taint} not tolerated"
    return _resource_reason(check, node)


def evaluate(plan: PodPlan, node: NodeView) -> NodeVerdict:
    reasons: list[str] = []
    first_group: str | None = None
    for check in plan.checks:
        reason = failure(check, node, plan)
        if reason is not None:
            if first_group is None:
                first_group = check.group
            reasons.append(reason)
    matched = [p for p in plan.preferred if term_matches(p.term, node.labels, node.name)]
    return NodeVerdict(
        node=node.name,
        fits=not reasons,
        reason=reasons[0] if reasons else None,
        check=first_group,
        reasons=tuple(reasons),
        score=sum(p.weight for p in matched),
        preferred=tuple(
            f"{describe_preferred(p.term.requirements)} (+{p.weight})" for p in matched
        ),
        pairs=pairs_verdict(plan.applied, plan, node.labels, node.pairing),
        notes=tuple(n for n in (kubelet_note(node),) if n is not None),
    )


def with_usage(
    nodes: Sequence[NodeView], usage: Mapping[str, tuple[Amounts, int]]
) -> list[NodeView]:
    """Nodes with what their bound pods already request (from a live cluster)."""
    out = []
    for node in nodes:
        used, pods = usage.get(node.name, ({}, 0))
        out.append(replace(node, used=used, pods=pods))
    return out
