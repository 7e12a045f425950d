"""One verdict per node: fits or not, the first failing check in words, the preferred score.

`explain_pod` is the whole of `topoplace-webhook explain` without I/O: it mutates the pod as
the webhook would, then runs the pod's checks (webhook/explain/checks.py) on every node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from common.vocabulary import Label
from webhook.engine.mutation import EngineSettings
from webhook.engine.recipe import mutate
from webhook.explain.alike import alike_key
from webhook.explain.checks import Check, PodPlan, plan_for
from webhook.explain.free import NUMA_FREE_CHECK, StaleOf, ZonesOf, free_refusal, remote_note
from webhook.explain.kubelet import kubelet_note, topology_failure
from webhook.explain.pairs import PairsVerdict, pairs_verdict
from webhook.explain.reasons import AGENT_MISSING, describe, describe_preferred, has_agent_labels
from webhook.policy.loader import PolicySet
from webhook.policy.model import PlacementPolicy
from webhook.topology.filters.nodes import NodeView
from webhook.topology.filters.selectors import first_failing, parse_int64, term_matches
from webhook.topology.filters.tolerations import (
    NOT_READY_TAINTS,
    UNSCHEDULABLE_TAINT,
    Taint,
    tolerates,
    untolerated,
)
from webhook.topology.requests import Amounts, format_amount
from webhook.topology.zones import NodeZones
from webhook.vocabulary import APPLIED_ANNOTATION

__all__ = [
    "Explanation",
    "NodeVerdict",
    "applied_policy",
    "evaluate",
    "explain_pod",
    "failure",
    "judge",
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


@dataclass(frozen=True, slots=True)
class Explanation:
    pod: str
    namespace: str
    plan: PodPlan
    nodes: tuple[NodeVerdict, ...]
    warnings: tuple[str, ...] = ()
    denial: str | None = None
    mutated: dict[str, Any] = field(default_factory=dict)

    @property
    def fitting(self) -> int:
        return sum(v.fits for v in self.nodes)

    @property
    def misses(self) -> list[tuple[str, int]]:
        """First failing reasons and how many nodes each, most frequent first."""
        counted = Counter(v.reason for v in self.nodes if v.reason is not None)
        return counted.most_common()

    @property
    def summary(self) -> str:
        total = len(self.nodes)
        head = f"{self.fitting} of {total} node{'s' if total != 1 else ''} fit"
        return " | ".join([head, *(f"{n} × {reason}" for reason, n in self.misses)])


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


def _judge_all(
    plan: PodPlan, nodes: Sequence[NodeView], zones: ZonesOf | None
) -> Iterator[NodeVerdict]:
    """`evaluate` and the numa-free check on each node, once per group of alike nodes
    (alike.py) with alike NUMA zones (zones_of_documents shares their tuple)."""
    key_of = alike_key(plan)
    judged: dict[Hashable, tuple[object, NodeVerdict]] = {}
    for node in nodes:
        free = zones(node.name) if zones is not None else None
        shape = (id(free.zones), free.policy, free.scope) if free is not None else None
        key = (key_of(node), shape)
        known = judged.get(key)
        if known is None:  # the memo holds `free`, so no id in a key is reused meanwhile
            known = judged[key] = (free, judge(plan, node, zones))
            yield known[1]
        else:
            yield replace(known[1], node=node.name)


def applied_policy(
    mutated: Mapping[str, Any], name: str | None, policies: PolicySet
) -> PlacementPolicy | None:
    """The policy the webhook applied to this pod, or None (no policy, a missing one, a
    forbidden namespace, a mirror pod): the applied annotation says which."""
    if name is None:
        return None
    metadata = mutated.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    applied = annotations.get(APPLIED_ANNOTATION) if isinstance(annotations, dict) else None
    if not isinstance(applied, str) or applied.split("@", 1)[0] != name:
        return None
    return policies.get(name)


def _order(verdict: NodeVerdict) -> tuple[bool, int, str]:
    return (not verdict.fits, -verdict.score, verdict.node)


def explain_pod(
    pod: dict[str, Any],
    namespace: str,
    policies: PolicySet,
    nodes: Sequence[NodeView],
    settings: EngineSettings | None = None,
    *,
    label: str = "",
    zones: ZonesOf | None = None,
    stale: StaleOf | None = None,
) -> Explanation:
    """Mutate `pod` as the webhook would, then judge it against every node; with `zones`
    (NodeResourceTopology per node), a node whose hardware fits but whose NUMA nodes have no
    room now fails check `numa-free`; `stale` notes a node whose object is out of date.

    Raises webhook.engine.pod_shape.InvalidPod when the pod is not shaped like a Pod.
    """
    mutation = mutate(pod, namespace, policies, settings or EngineSettings())
    policy = applied_policy(mutation.pod, mutation.policy, policies)
    if not mutation.allowed:
        plan = plan_for(pod, None)
        denied = f"the webhook denies this pod: {mutation.denial}"
        verdicts = tuple(
            NodeVerdict(n.name, False, denied, "admission", (denied,), 0, ()) for n in nodes
        )
    else:
        plan = plan_for(mutation.pod, policy)
        judged = _judge_all(plan, nodes, zones)
        if zones is not None:  # each node's own measured remote access (not alike-shared)
            weight = policy.spec.placement.remote_access_weight if policy is not None else 0
            judged = (_with_remote(v, zones(v.node), weight) for v in judged)
        if stale is not None:
            judged = (_with_note(v, stale(v.node)) for v in judged)
        verdicts = tuple(sorted(judged, key=_order))
    name = label or _pod_label(pod)
    return Explanation(
        pod=name,
        namespace=namespace,
        plan=plan,
        nodes=verdicts,
        warnings=tuple(mutation.warnings),
        denial=mutation.denial,
        mutated=mutation.pod,
    )


def judge(plan: PodPlan, node: NodeView, zones: ZonesOf | None = None) -> NodeVerdict:
    """One node's verdict as explain gives it: the checks, then the NUMA free capacity."""
    return _now(evaluate(plan, node), plan, zones)


def _now(verdict: NodeVerdict, plan: PodPlan, zones: ZonesOf | None) -> NodeVerdict:
    if not verdict.fits or zones is None:
        return verdict
    reason = free_refusal(plan, zones(verdict.node))
    if reason is None:
        return verdict
    return replace(verdict, fits=False, reason=reason, check=NUMA_FREE_CHECK, reasons=(reason,))


def _with_remote(verdict: NodeVerdict, zones: NodeZones | None, weight: int) -> NodeVerdict:
    return _with_note(verdict, remote_note(zones, weight))


def _with_note(verdict: NodeVerdict, note: str | None) -> NodeVerdict:
    return verdict if note is None else replace(verdict, notes=(*verdict.notes, note))


def _pod_label(pod: Mapping[str, Any]) -> str:
    metadata = _v if isinstance(_v := pod.get("metadata"), Mapping) else {}
    return f"Pod/{metadata.get('name') or metadata.get('generateName') or '?'}"


def with_usage(
    nodes: Sequence[NodeView], usage: Mapping[str, tuple[Amounts, int]]
) -> list[NodeView]:
    """Nodes with what their bound pods already request (from a live cluster)."""
    out = []
    for node in nodes:
        used, pods = usage.get(node.name, ({}, 0))
        out.append(replace(node, used=used, pods=pods))
    return out
