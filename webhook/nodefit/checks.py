"""The checks one pod makes on a node, in the order `explain` reports the first failure:
kube-scheduler's default filter order (pkg/scheduler/apis/config/v1/default_plugins.go), so
explain's first reason names the plugin the pod's FailedScheduling event names for that node:
NodeUnschedulable (cordoned), NodeName, TaintToleration, NodeAffinity (here: the agent's
labels being there at all, each of the policy's own required expressions in the policy's
order as webhook/engine/affinity.py builds them, the kubelet-shape terms, then the rest of
the pod's node affinity and nodeSelector: the scheduler reports all of them as one), then
NodeResourcesFit (the GPU resource first), and last the kubelet's own admission, once the
scheduler would have bound the pod there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from common.vocabulary import LABEL_PREFIX, Label
from webhook.engine.affinity import (
    least_numa_request,
    numa_request,
    required_expressions,
    shape_args,
)
from webhook.placement_model.filters.selectors import (
    PreferredTerm,
    Requirement,
    Term,
    node_selector,
    parse_preferred,
    parse_required,
    parse_requirement,
)
from webhook.placement_model.filters.tolerations import Toleration, parse_tolerations
from webhook.placement_model.kubelet_admission import PodUnits, pod_units
from webhook.placement_model.requests import NATIVE, Amounts, guaranteed, pod_gpus, pod_requests
from webhook.placement_model.shape_terms import parsed_terms
from webhook.policy.model import PlacementPolicy

__all__ = ["SHAPE_CHECK", "Check", "Kind", "PodPlan", "plan_for"]

Kind = Literal[
    "name", "agent", "policy", "shape", "affinity", "selector", "cordon", "taints", "resource",
    "topology",
]  # fmt: skip
SHAPE_CHECK = "kubelet shape"  # the group of the policy's ORed kubelet-shape terms


class Check(NamedTuple):
    """One check; `group` names it in summaries ("gpu-nic-link", "allocatable nvidia.com/gpu").

    A NamedTuple, not a frozen dataclass: a plan builds a dozen per admission, and a frozen
    dataclass's __init__ costs several times as much."""

    kind: Kind
    group: str
    requirement: Requirement | None = None  # policy
    terms: tuple[Term, ...] = ()  # affinity, shape
    selector: tuple[tuple[str, str], ...] = ()  # selector
    tolerations: tuple[Toleration, ...] = ()  # cordon, taints
    resource: str = ""  # resource
    need: int = 0  # resource; the GPU count for policy count checks
    node_name: str = ""  # name


_NO_UNITS = PodUnits((), ())


@dataclass(frozen=True, slots=True)
class PodPlan:
    """Everything about one pod that explain and the admission check need, parsed once."""

    policy: str | None
    gpus: int
    gpu_resource: str
    requests: Amounts
    checks: tuple[Check, ...]
    preferred: tuple[PreferredTerm, ...]
    units: PodUnits = _NO_UNITS  # what the kubelet aligns, under either scope
    guaranteed: bool = False
    # The policy applied (the GPU↔NIC pairs verdict reads what it asks for).
    applied: PlacementPolicy | None = field(default=None, compare=False)


def short_key(key: str) -> str:
    return key.removeprefix(LABEL_PREFIX)


def plan_for(pod: Mapping[str, Any], policy: PlacementPolicy | None) -> PodPlan:
    """The checks for a pod as it will be created (already mutated by the webhook).

    `policy` is the policy the webhook applied, or None: its required expressions are
    recomputed from the policy, so each can be named in the policy's words.
    """
    spec = _v if isinstance(_v := pod.get("spec"), dict) else {}
    gpu_resource = policy.spec.gpu_resource if policy is not None else "nvidia.com/gpu"
    gpus = pod_gpus(spec, gpu_resource)
    tolerations = parse_tolerations(spec)
    checks: list[Check] = [Check("cordon", "cordoned", tolerations=tolerations)]
    node_name = spec.get("nodeName")
    if isinstance(node_name, str) and node_name:
        checks.append(Check("name", "spec.nodeName", node_name=node_name))
    checks.append(Check("taints", "taints", tolerations=tolerations))
    units = pod_units(spec)
    if policy is not None:
        checks += _policy_checks(policy, units, gpus)
    required = parse_required(spec)
    if required is not None:
        checks.append(Check("affinity", "node affinity", terms=required))
    selector = node_selector(spec)
    if selector:
        checks.append(Check("selector", "nodeSelector", selector=tuple(selector.items())))
    requests = pod_requests(spec)
    rdma = policy.spec.resources.rdma.resource if policy and policy.spec.resources.rdma else ""
    checks += _resource_checks(requests, gpu_resource, rdma)
    # Last: the kubelet's own admission, once the scheduler would have bound the pod there.
    checks.append(Check("topology", "kubelet topology manager", resource=rdma or "rdma/ib"))
    return PodPlan(
        policy=policy.name if policy is not None else None,
        gpus=gpus,
        gpu_resource=gpu_resource,
        requests=requests,
        checks=tuple(checks),
        preferred=parse_preferred(spec),
        units=units,
        guaranteed=guaranteed(spec),
        applied=policy,
    )


def _policy_checks(policy: PlacementPolicy, units: PodUnits, gpus: int) -> list[Check]:
    """The policy's own expressions, in its words, and the kubelet-shape terms."""
    checks: list[Check] = []
    placement, gpu_resource = policy.spec.placement, policy.spec.gpu_resource
    # As webhook/engine/recipe.py asks it, so the two cannot disagree.
    args = shape_args(placement, units, gpus)
    # singleNumaNode's CPUs and memory named in the policy's words: the pod's when no
    # shapes hold them, else the least any scope's shapes ask (so the check is implied
    # by every term the engine wrote, and never refuses a node they match).
    numa = numa_request(units) if placement.single_numa_node else None
    if numa is not None and args is not None:
        numa = least_numa_request(numa, units)
    # The policy words checked on their own too (the kubelet-shape terms imply them):
    # "topology-manager-policy single-numa-node; policy needs restricted" says more.
    ours = required_expressions(placement, gpus=gpus, warnings=[], numa=numa)
    if ours or (args is not None and not args.open):
        checks.append(Check("agent", "topoplace labels"))
    needs = {
        Label.MAX_CPUS_PER_NUMA_NODE: numa.cpus if numa else 0,
        Label.MAX_MEMORY_GIB_PER_NUMA_NODE: numa.memory_gib if numa else 0,
    }
    for expr in ours:
        req = parse_requirement(expr)
        need = needs.get(req.key, gpus)
        checks.append(Check("policy", short_key(req.key), requirement=req, need=need))
    if args is not None:
        # The same terms the engine wrote (kubelet_terms), parsed once per pod shape.
        terms = parsed_terms(units.pod, units.container, args.policies, gpu_resource,
                             args.open, args.single)  # fmt: skip
        checks.append(Check("shape", SHAPE_CHECK, terms=terms))
    return checks


def _resource_checks(requests: Mapping[str, int], gpu_resource: str, rdma: str) -> list[Check]:
    """NodeResourcesFit, the GPU resource first, then the RDMA one, CPU, memory, the rest."""
    first = [r for r in (gpu_resource, rdma, "cpu", "memory", "ephemeral-storage") if r]
    ordered = [r for r in first if r in requests]
    ordered += sorted(r for r in requests if r not in first and r not in NATIVE)
    checks = [
        Check("resource", f"allocatable {resource}", resource=resource, need=requests[resource])
        for resource in ordered
    ]
    checks.append(Check("resource", "allocatable pods", resource="pods", need=1))
    return checks
