"""explain without I/O: mutate a pod as the webhook would, then give every node's verdict
(node_verdict.py), judged once per group of alike nodes, with the NUMA nodes' free capacity
now (free_check.py) and each node's measured remote access.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from webhook.engine.outcome import EngineSettings
from webhook.engine.recipe import mutate
from webhook.nodefit.checks import PodPlan, plan_for
from webhook.nodefit.free_check import NUMA_FREE_CHECK, StaleOf, ZonesOf, free_refusal, remote_note
from webhook.nodefit.node_groups import alike_key
from webhook.nodefit.node_verdict import NodeVerdict, evaluate
from webhook.placement_model.filters.nodes import NodeView
from webhook.placement_model.zones import NodeZones
from webhook.policy.loader import PolicySet

__all__ = ["NUMA_FREE_CHECK", "Explanation", "explain_pod", "judge"]


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

    Raises webhook.engine.pod_fields.InvalidPod when the pod is not shaped like a Pod.
    """
    mutation = mutate(pod, namespace, policies, settings or EngineSettings())
    policy = mutation.applied
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
