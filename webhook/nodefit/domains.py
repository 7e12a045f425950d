"""explain for a workload under keepTogether: per domain of the policy's level, how many of
its pods fit now. (pure)

Built on the per-node verdicts (node_verdict.py): a node holds as many copies of the pod as pass
every check with the earlier copies' requests added to what the node already runs; the
NUMA-free check (NodeResourceTopology) judges the first copy. A domain's count is the sum over
its nodes, capped at the pods the workload wants; its reason is the first refusal among its
nodes. Nodes without the level's label are in no domain.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from webhook.nodefit.checks import PodPlan
from webhook.nodefit.explanation import judge
from webhook.nodefit.free_check import ZonesOf
from webhook.nodefit.node_verdict import evaluate
from webhook.placement_model.filters.nodes import NodeView
from webhook.placement_model.levels import domains_at

__all__ = [
    "DomainVerdict",
    "GroupConstraint",
    "NodeCopies",
    "WorkloadDomains",
    "copies_on",
    "explain_domains",
    "group_constraint",
]


@dataclass(frozen=True, slots=True)
class NodeCopies:
    node: str
    pods: int  # copies of the pod that fit here now
    reason: str | None  # why not one more (None: the workload's count was reached)


@dataclass(frozen=True, slots=True)
class DomainVerdict:
    domain: str
    fits: int  # pods that fit in the domain, at most `wanted`
    wanted: int
    nodes: tuple[NodeCopies, ...]

    @property
    def reason(self) -> str | None:
        """Why no more pods fit (None when the domain holds them all)."""
        if self.fits >= self.wanted:
            return None
        for n in self.nodes:
            if n.reason:
                held = f" holds {n.pods}, then" if n.pods else ""
                return f"node {n.node}{held}: {n.reason}"
        return None

    @property
    def line(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        return f"{self.domain}: {self.fits} of {self.wanted} pods fit{why}"


@dataclass(frozen=True, slots=True)
class WorkloadDomains:
    level: str  # the policy's word (network-tier-2)
    key: str  # the node label
    wanted: int
    domains: tuple[DomainVerdict, ...]  # most pods first
    unlabelled: tuple[str, ...]  # nodes without the label
    source: str | None = None  # the PodGroup whose constraint this is (None: the policy's)

    @property
    def fitting(self) -> int:
        return sum(d.fits >= d.wanted for d in self.domains)


def copies_on(plan: PodPlan, node: NodeView, limit: int, zones: ZonesOf | None) -> NodeCopies:
    first = judge(plan, node, zones)
    if not first.fits:
        return NodeCopies(node.name, 0, first.reason)
    placed = 1
    while placed < limit:
        used = dict(node.used)
        for resource, amount in plan.requests.items():
            used[resource] = used.get(resource, 0) + placed * amount
        verdict = evaluate(plan, replace(node, used=used, pods=node.pods + placed))
        if not verdict.fits:
            return NodeCopies(node.name, placed, verdict.reason)
        placed += 1
    return NodeCopies(node.name, placed, None)


def explain_domains(
    plan: PodPlan,
    nodes: Sequence[NodeView],
    *,
    level: str,
    key: str,
    wanted: int,
    zones: ZonesOf | None = None,
    source: str | None = None,
) -> WorkloadDomains:
    by_name: Mapping[str, NodeView] = {n.name: n for n in nodes}
    grouped = domains_at(((n.name, n.labels) for n in nodes), key)
    unlabelled = tuple(grouped.pop("", ()))
    verdicts = []
    for domain, names in grouped.items():
        counted = tuple(copies_on(plan, by_name[name], wanted, zones) for name in sorted(names))
        verdicts.append(
            DomainVerdict(domain, min(wanted, sum(c.pods for c in counted)), wanted, counted)
        )
    verdicts.sort(key=lambda d: (-d.fits, d.domain))
    return WorkloadDomains(level, key, wanted, tuple(verdicts), unlabelled, source)


@dataclass(frozen=True, slots=True)
class GroupConstraint:
    """What the scheduler keeps together (Kubernetes v1.37 PodGroups): the topology key of
    the group's constraint (None: none set) and how many pods it places at once."""

    source: str  # "PodGroup/gang-0", "Job/train spec.scheduling"
    key: str | None
    pods: int | None  # the gang's minCount (None: not a gang, or not said)


def group_constraint(
    workload: dict[str, Any], pod: dict[str, Any], documents: Iterable[Any] = ()
) -> GroupConstraint | None:
    """The PodGroup `pod` names (found among `documents`), or the Job's spec.scheduling, that
    will hold the pods; None when neither is there."""
    spec = _v if isinstance(_v := pod.get("spec"), dict) else {}
    named = (spec.get("schedulingGroup") or {}).get("podGroupName")
    if isinstance(named, str) and named:
        for doc in documents:
            if not isinstance(doc, dict) or doc.get("kind") != "PodGroup":
                continue
            meta = doc.get("metadata")
            if isinstance(meta, dict) and meta.get("name") == named:
                return _constraint(f"PodGroup/{named}", doc.get("spec"))
        return None
    job_spec = workload.get("spec") if workload.get("kind") == "Job" else None
    if isinstance(job_spec, dict) and isinstance(job_spec.get("scheduling"), dict):
        name = (workload.get("metadata") or {}).get("name") or "?"
        return _constraint(f"Job/{name} spec.scheduling", job_spec["scheduling"])
    return None


def _constraint(source: str, block: Any) -> GroupConstraint:
    block = block if isinstance(block, dict) else {}
    topology = (block.get("schedulingConstraints") or {}).get("topology") or []
    key = topology[0].get("key") if topology and isinstance(topology[0], dict) else None
    gang = (block.get("schedulingPolicy") or {}).get("gang")
    count = gang.get("minCount") if isinstance(gang, dict) else None
    return GroupConstraint(
        source,
        key if isinstance(key, str) else None,
        count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None,
    )
