"""Which node shapes' kubelets admit a pod on an idle node, as label requirements: ORed
terms for required node affinity, so kube-scheduler never binds a pod where its kubelet must
refuse it (TopologyAffinityError, kubernetes#84869).

The merge (webhook/placement_model/merge.py) restated on the agent's labels. On a node whose NUMA
nodes are alike (what `max-*-per-numa-node` describe), a request of X needs ⌈X / L⌉ NUMA
nodes, L being the label: `single-numa-node` admits a unit when every aligned resource fits
one NUMA node (L ≥ X); `restricted` when every aligned resource needs the same number k of
NUMA nodes (L in [⌈X/k⌉, ⌈X/(k−1)⌉ − 1]). The terms hold every node to the shape the
static CPU and Static memory managers need (CPUs and memory aligned too): what aligning GPU
nodes run (docs/install.md). A node without those managers aligns less and admits more, so
it is held to more than its kubelet asks: a pod may wait where it could have run, never run
where it must be refused; explain says which. One term per node shape instead of one per
manager combination keeps the patch small (it is in every pod's admission response).
RDMA NICs have no per-NUMA-node label: their alignment is left to explain and the warnings.
Unequal NUMA nodes (a machine whose largest NUMA node for GPUs is not the one for CPUs) can
still refuse; explain, on the node's topology annotation, says so.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterable, Sequence
from typing import Any

from common.vocabulary import Label
from webhook.placement_model.filters.selectors import Term, parse_requirement
from webhook.placement_model.requests import Unit
from webhook.policy.model import REFUSING_TOPOLOGY_POLICIES

__all__ = ["MAX_NUMA_SPAN", "MAX_SHAPES", "SHAPE_LABELS", "admitting_terms", "parsed_terms"]

_GIB = 2**30
# The labels the terms are written on: the webhook owns what a pod's terms say on them.
SHAPE_LABELS = frozenset({
    Label.TOPOLOGY_MANAGER_POLICY, Label.TOPOLOGY_MANAGER_SCOPE, Label.MAX_GPUS_PER_NUMA_NODE,
    Label.MAX_CPUS_PER_NUMA_NODE, Label.MAX_MEMORY_GIB_PER_NUMA_NODE, Label.NUMA_NODES,
})  # fmt: skip
# The most NUMA nodes one unit's band is written for (restricted's k): beyond, a node's
# kubelet would need more than any machine has (the Topology Manager is off past
# max-allowable-numa-nodes, 8 by default), and the terms would grow with the pod's numbers.
MAX_NUMA_SPAN = 64
# The most shapes kept per policy and scope: past it (containers asking differently shaped
# amounts), the rest are left out, so the pod may wait where it could run, never the reverse.
MAX_SHAPES = 64
Ranges = dict[str, tuple[int, int | None]]  # label -> (lowest, highest or None) allowed
Expression = dict[str, Any]


def _needs(unit: Unit, gpu_resource: str) -> dict[str, int]:
    """The unit's aligned amounts in the labels' units (GPUs, CPUs, GiB), by label."""
    out = {}
    if unit.amounts.get(gpu_resource, 0) > 0:
        out[Label.MAX_GPUS_PER_NUMA_NODE] = unit.amounts[gpu_resource]
    if unit.amounts.get("cpu", 0) > 0:
        out[Label.MAX_CPUS_PER_NUMA_NODE] = -(-unit.amounts["cpu"] // 1000)
    if unit.amounts.get("memory", 0) > 0:
        out[Label.MAX_MEMORY_GIB_PER_NUMA_NODE] = -(-unit.amounts["memory"] // _GIB)
    return out


def _width_range(need: int, k: int) -> tuple[int, int | None]:
    """The per-NUMA-node counts L for which ⌈need / L⌉ == k."""
    low = -(-need // k)
    return (low, None) if k == 1 else (low, -(-need // (k - 1)) - 1)


def _options(needs: dict[str, int], policy: str) -> list[Ranges]:
    """The label ranges under which the kubelet admits one unit with these needs."""
    if policy == "single-numa-node":
        return [{label: (need, None) for label, need in needs.items()}]
    if len(needs) <= 1:
        return [{}]  # one aligned resource always agrees with itself
    options = []
    for k in range(1, min(*needs.values(), MAX_NUMA_SPAN) + 1):
        ranges: Ranges = {label: _width_range(need, k) for label, need in needs.items()}
        if all(hi is None or lo <= hi for lo, hi in ranges.values()):
            if k > 1:
                ranges[Label.NUMA_NODES] = (k, None)
            options.append(ranges)
    return options


def _meet(a: Ranges, b: Ranges) -> Ranges | None:
    out = dict(a)
    for label, (lo, hi) in b.items():
        if label in out:
            lo0, hi0 = out[label]
            lo = max(lo, lo0)
            hi = hi0 if hi is None else (hi if hi0 is None else min(hi, hi0))
        if hi is not None and lo > hi:
            return None
        out[label] = (lo, hi)
    return out


def _unit_ranges(units: Sequence[Unit], gpu_resource: str, policy: str) -> list[Ranges]:
    combined: list[Ranges] = [{}]
    for unit in units:
        options = _options(_needs(unit, gpu_resource), policy)
        merged = (_meet(a, b) for a, b in itertools.product(combined, options))
        combined = _unique(m for m in merged if m is not None)[:MAX_SHAPES]
    return combined


def _unique(found: Iterable[Ranges]) -> list[Ranges]:
    out: list[Ranges] = []
    for ranges in found:
        if ranges not in out:
            out.append(ranges)
    return out


def _expressions(words: Sequence[tuple[str, str]], ranges: Ranges) -> list[Expression]:
    exprs = [{"key": key, "operator": "In", "values": [value]} for key, value in words]
    for label in sorted(ranges):
        lo, hi = ranges[label]
        if lo > 1:
            exprs.append({"key": label, "operator": "Gt", "values": [str(lo - 1)]})
        elif hi is not None or label != Label.NUMA_NODES:
            exprs.append({"key": label, "operator": "Exists", "values": []})
        if hi is not None:
            exprs.append({"key": label, "operator": "Lt", "values": [str(hi + 1)]})
    for e in exprs:
        if not e["values"]:
            del e["values"]
    return exprs


Words = tuple[tuple[str, str], ...]


@functools.lru_cache(maxsize=1024)
def _terms(pod: tuple[Unit, ...], container: tuple[Unit, ...], policies: tuple[str, ...],
           gpu_resource: str, open_: bool = False,
           single: bool = False) -> tuple[tuple[Expression, ...], ...]:  # fmt: skip
    out: list[list[Expression]] = []
    units = {"pod": pod, "container": container}
    calm = [p for p in policies if p not in REFUSING_TOPOLOGY_POLICIES]
    if calm:
        # Open: every node whose kubelet does not refuse, whatever else its label says
        # (absent, or a policy the model does not know).
        operator, values = ("NotIn", list(REFUSING_TOPOLOGY_POLICIES)) if open_ else ("In", calm)
        word = {"key": Label.TOPOLOGY_MANAGER_POLICY, "operator": operator, "values": values}
        # singleNumaNode on a kubelet that does not align: one NUMA node holds the pod.
        for ranges in _single(pod, gpu_resource) if single else [{}]:
            out.append([word, *_expressions((), ranges)])
    # Each (words, ranges) once, with every aligning policy it holds for: single-numa-node's
    # terms are restricted's one-NUMA-node terms, so both share them.
    shared: dict[str, list[str]] = {}
    for policy in (p for p in policies if p in REFUSING_TOPOLOGY_POLICIES):
        by_scope = {
            scope: _with_single(_unit_ranges(u, gpu_resource, policy), u, gpu_resource, single)
            for scope, u in units.items()
        }
        # The scope named only where it changes the answer: fewer terms, no label required
        # that the kubelet's decision does not read.
        found: dict[Words, list[Ranges]] = (
            {(): by_scope["pod"]}
            if by_scope["pod"] == by_scope["container"]
            else {((Label.TOPOLOGY_MANAGER_SCOPE, s),): o for s, o in by_scope.items()}
        )
        for words, options in found.items():
            for ranges in options:
                key = json.dumps(_expressions(words, ranges))
                shared.setdefault(key, []).append(policy)
    for key, named in shared.items():
        policy_expr = {"key": Label.TOPOLOGY_MANAGER_POLICY, "operator": "In", "values": named}
        out.append([policy_expr, *json.loads(key)])
    if not out:  # no shape admits the pod: a term no node matches keeps it Pending
        key = Label.TOPOLOGY_MANAGER_POLICY
        out.append([{"key": key, "operator": "Exists"}, {"key": key, "operator": "DoesNotExist"}])
    return tuple(tuple(term) for term in out)


def _single(units: tuple[Unit, ...], gpu_resource: str) -> list[Ranges]:
    return _unit_ranges(units, gpu_resource, "single-numa-node")


def _with_single(options: list[Ranges], units: tuple[Unit, ...], gpu_resource: str,
                 single: bool) -> list[Ranges]:  # fmt: skip
    """`options` held to one NUMA node per unit of this scope (the policy's singleNumaNode:
    under scope container each container's own needs, not the pod's)."""
    if not single:
        return options
    one = _single(units, gpu_resource)
    return _unique(m for a in options for b in one if (m := _meet(a, b)) is not None)


def admitting_terms(
    pod: tuple[Unit, ...],
    container: tuple[Unit, ...],
    policies: Sequence[str],
    gpu_resource: str,
    *,
    open_: bool = False,
    single: bool = False,
) -> tuple[tuple[Expression, ...], ...]:
    """ORed node selector requirements: the node shapes whose kubelet, under one of `policies`,
    admits a pod with these aligned units (scope pod / scope container) on an idle node.
    `open_`: the policy names no Topology Manager policy, so nodes under any other (or none
    known) stay allowed; `single`: the policy's singleNumaNode, per unit of each scope.
    Shared between calls (every pod of a Job asks the same): read them, never change them."""
    return _terms(pod, container, tuple(policies), gpu_resource, open_, single)


@functools.lru_cache(maxsize=1024)
def parsed_terms(pod: tuple[Unit, ...], container: tuple[Unit, ...], policies: tuple[str, ...],
                 gpu_resource: str, open_: bool = False,
                 single: bool = False) -> tuple[Term, ...]:  # fmt: skip
    """admitting_terms as the filter rules read them (explain's check, the node index)."""
    terms = _terms(pod, container, policies, gpu_resource, open_, single)
    return tuple(Term(tuple(map(parse_requirement, t)), ()) for t in terms)
