"""Node affinity: the policy's placement as required expressions, datasets as preferences.

Required expressions go into EVERY existing nodeSelectorTerm: terms are ORed, so adding to
only one would let the others schedule anywhere. The user's own terms are never dropped.
Whenever the kubelet aligns something of the mutated pod (its devices, or the CPUs and
memory of a Guaranteed pod), the node shapes whose kubelet admits it come as ORed
alternatives (webhook/placement_model/shape_terms.py), under the policies the policy lists, or under
every policy when it lists none (so a pod we made Guaranteed is never bound where its
kubelet must refuse it): each user term is repeated once per alternative, and the result is
written in its smallest equivalent form (webhook/placement_model/filters/minimal.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from common.kubelet_contract import TOPOLOGY_MANAGER_POLICIES
from common.vocabulary import LINK_WORDS, Label, dataset_label
from webhook import jsonio
from webhook.engine.patch import clone
from webhook.engine.pod_fields import PodSpec, required_terms
from webhook.placement_model.filters.minimal import minimal_terms
from webhook.placement_model.kubelet_admission import PodUnits
from webhook.placement_model.shape_terms import SHAPE_LABELS, admitting_terms
from webhook.policy.model import (
    REFUSING_TOPOLOGY_POLICIES,
    Dataset,
    Placement,
)

__all__ = [
    "NumaRequest",
    "ShapeArgs",
    "add_preferred",
    "add_required",
    "dataset_preferences",
    "kubelet_terms",
    "least_numa_request",
    "numa_request",
    "required_expressions",
    "shape_args",
    "user_terms",
]

Expression = dict[str, Any]
_GIB = 2**30


class NumaRequest(NamedTuple):
    """What the kubelet must place on one NUMA node under single-numa-node alignment."""

    cpus: int  # exclusive CPUs: whole-CPU containers of a Guaranteed pod
    memory_gib: int  # the Guaranteed pod's memory, GiB rounded up


def _numa_need(amounts: Mapping[str, int]) -> NumaRequest:
    """Whole CPUs and GiB, rounded up as the agent's per-NUMA-node labels count them."""
    return NumaRequest(-(-amounts.get("cpu", 0) // 1000), -(-amounts.get("memory", 0) // _GIB))


def numa_request(units: PodUnits) -> NumaRequest:
    """The pod-wide amounts the static CPU and memory managers align (scope pod)."""
    return _numa_need(units.pod[0].amounts if units.pod else {})


def least_numa_request(pod: NumaRequest, units: PodUnits) -> NumaRequest:
    """`pod` lowered to the largest container's own needs (scope container asks no more)."""
    needs = [_numa_need(u.amounts) for u in units.container]
    cpus = max((n.cpus for n in needs), default=0)
    memory = max((n.memory_gib for n in needs), default=0)
    return NumaRequest(min(pod.cpus, cpus), min(pod.memory_gib, memory))


class ShapeArgs(NamedTuple):
    """How the kubelet-shape terms are asked for (admitting_terms' arguments)."""

    policies: tuple[str, ...]
    open: bool  # the policy lists no Topology Manager policy: every node not refusing stays
    single: bool  # the policy's singleNumaNode, held per unit of each scope


def shape_args(placement: Placement, units: PodUnits, gpus: int) -> ShapeArgs | None:
    """The kubelet-shape terms this pod gets, or None (nothing to add): when the policy lists
    an aligning Topology Manager policy, or lists none and the kubelet aligns something of
    the pod (our own Guaranteed requests must not get it refused). singleNumaNode counts
    only for a pod with GPUs, as in required_expressions."""
    listed = tuple(placement.topology_manager_policies or ())
    single = placement.single_numa_node and gpus > 0
    if listed:
        if not any(p in REFUSING_TOPOLOGY_POLICIES for p in listed):
            return None
        return ShapeArgs(listed, False, single)
    if not units.pod:
        return None
    return ShapeArgs(TOPOLOGY_MANAGER_POLICIES, True, single)


def kubelet_terms(
    args: ShapeArgs | None, units: PodUnits, gpu_resource: str
) -> Sequence[Sequence[Expression]] | None:
    """The ORed node shapes whose kubelet admits the pod; None when there are none to add."""
    if args is None:
        return None
    return admitting_terms(
        units.pod, units.container, args.policies, gpu_resource, open_=args.open,
        single=args.single,
    )  # fmt: skip


def required_expressions(
    placement: Placement,
    *,
    gpus: int,
    warnings: list[str],
    devices: bool = True,
    numa: NumaRequest | None = None,
    shaped: bool = False,
) -> list[Expression]:
    """Match expressions on the agent's node labels for this placement and GPU count.

    `numa` is what the pod asks one NUMA node to hold (numa_request of the mutated spec),
    given when no kubelet-shape terms hold it per scope: with singleNumaNode, a node whose
    largest NUMA node has fewer CPUs or less memory is excluded, since its kubelet would
    refuse the pod with TopologyAffinityError.
    `devices=False` leaves out the GPU/NIC terms (link, pairs, single NUMA node): DRA claims
    enforce those per device, and the node-wide labels would only narrow the choice.
    `shaped`: kubelet_terms name the Topology Manager policies, so no expression here does."""
    exprs: list[Expression] = []
    if not devices:
        placement = _without_device_terms(placement)
    if placement.gpu_nic_link is not None:
        acceptable = LINK_WORDS[: LINK_WORDS.index(placement.gpu_nic_link) + 1]
        exprs.append(_expr(Label.GPU_NIC_LINK, "In", list(acceptable)))
    for wanted, key, field in (
        (placement.gpu_nic_pairs, Label.GPU_NIC_PAIRS, "gpuNicPairs"),
        (placement.single_numa_node, Label.MAX_GPUS_PER_NUMA_NODE, "singleNumaNode"),
    ):
        if not wanted:
            continue
        if gpus <= 0:
            warnings.append(f"placement.{field} skipped: the pod requests no GPU")
            continue
        # Node labels are integers: "at least N" is "Gt N-1".
        exprs.append(_expr(key, "Gt", [str(gpus - 1)]))
        if key == Label.MAX_GPUS_PER_NUMA_NODE and numa is not None:
            for need, numa_key in (
                (numa.cpus, Label.MAX_CPUS_PER_NUMA_NODE),
                (numa.memory_gib, Label.MAX_MEMORY_GIB_PER_NUMA_NODE),
            ):
                if need > 0:
                    exprs.append(_expr(numa_key, "Gt", [str(need - 1)]))
    if placement.topology_manager_policies and not shaped:
        exprs.append(
            _expr(Label.TOPOLOGY_MANAGER_POLICY, "In", list(placement.topology_manager_policies))
        )
    for key, value in placement.required_labels.items():
        exprs.append(_expr(key, "In", [value]))
    return exprs


def _without_device_terms(placement: Placement) -> Placement:
    return placement.model_copy(
        update={"gpu_nic_link": None, "gpu_nic_pairs": False, "single_numa_node": False}
    )


def dataset_preferences(datasets: list[Dataset]) -> list[dict[str, Any]]:
    """Preferred terms for nodes already holding each dataset version."""
    return [
        {
            "weight": d.prefer_weight,
            "preference": {"matchExpressions": [_expr(dataset_label(d.name), "In", [d.version])]},
        }
        for d in datasets
    ]


def add_required(
    spec: PodSpec,
    exprs: list[Expression],
    alternatives: Sequence[Sequence[Expression]] | None = None,
) -> None:
    """Add `exprs` to every nodeSelectorTerm, and with `alternatives` (ORed lists), make each
    term one term per alternative. Takes ownership of `exprs` (pass fresh ones), and reads
    `alternatives` without changing them.

    With alternatives, what a term holds on the kubelet-shape labels (SHAPE_LABELS) beyond
    `exprs` is the webhook's own from an earlier admission (the pod's resources may have
    changed since: a sidecar injected after us): it is taken out, the terms alike without it
    become one, and each gets the alternatives anew. So mutating twice changes nothing, and a
    reinvocation replaces the shapes rather than adding to them."""
    if not exprs and not alternatives:
        return
    node_affinity = _child(_affinity_of(spec), "nodeAffinity")
    required = _child(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
    terms = required.get("nodeSelectorTerms")
    # Expressions may be shared between the terms made, except where the input had terms:
    # then the patch edits some in place, and an RFC 6902 patch applied in memory must not
    # reach the same object twice.
    share = not terms
    if not terms:
        terms = [{"matchExpressions": []}]
    if alternatives:
        terms = _cores(terms, {_key(e) for e in exprs})
    out = []
    owned = True  # no term holds `exprs` yet
    for term in terms:
        existing = term.get("matchExpressions") or []
        have = {_key(e) for e in existing}
        added = [e for e in exprs if _key(e) not in have]
        if added:
            existing = [*existing, *(added if owned else map(clone, added))]
            have.update(map(_key, added))
            owned = False
        if not alternatives:
            out.append({**term, "matchExpressions": existing} if added else term)
            continue
        for alt, keys in zip(alternatives, _keys_of(alternatives), strict=True):
            extra = alt if keys.isdisjoint(have) else [e for e in alt if _key(e) not in have]
            extra = extra if share else list(map(clone, extra))
            out.append({**term, "matchExpressions": [*existing, *extra]})
    required["nodeSelectorTerms"] = _minimal(out)


# Minimal forms by the terms' JSON: pods of one policy and size write the same terms. The
# form is kept as JSON and read anew: no two pods, and no two terms, share an object (the
# API server's JSON never does, and an RFC 6902 patch applied in memory must not reach the
# same object twice).
_MINIMAL: dict[bytes, bytes] = {}
_MINIMAL_MAX = 1024


def _minimal(terms: list[Any]) -> list[Any]:
    key = jsonio.dumps(terms)
    found = _MINIMAL.get(key)
    if found is None:
        small = minimal_terms(terms)
        if len(_MINIMAL) >= _MINIMAL_MAX:
            _MINIMAL.clear()
        found = _MINIMAL[key] = key if small == terms else jsonio.dumps(small)
    loaded: list[Any] = jsonio.loads(found)
    return loaded


def user_terms(spec: PodSpec) -> int:
    """How many terms the kubelet shapes will multiply: the pod's own terms, less what an
    earlier admission of ours wrote (at least one)."""
    return max(len(_cores(required_terms(spec), set())), 1)


def _cores(terms: list[Any], ours: set[Any]) -> list[Any]:
    """Each term without the kubelet-shape expressions an earlier admission added, alike
    terms once, in order."""
    seen: set[Any] = set()
    out = []
    for term in terms:
        exprs = term.get("matchExpressions") or []
        kept = [e for e in exprs if e.get("key") not in SHAPE_LABELS or _key(e) in ours]
        stripped = len(kept) != len(exprs)
        core = {**term, "matchExpressions": kept} if stripped else term
        mark = (tuple(map(_key, kept)), repr(core.get("matchFields")))
        # Alike terms once: ORed, a repeat says nothing, and a pod mutated before holds each
        # of its terms once per shape.
        if mark not in seen:
            seen.add(mark)
            out.append(core)
    return out


# The keys of shared alternatives (webhook/placement_model/shape_terms.py hands every pod of
# a shape the same object), by identity; the object is held so its id cannot be reused.
_ALTERNATIVE_KEYS: dict[int, tuple[object, tuple[frozenset[Any], ...]]] = {}


def _keys_of(alternatives: Sequence[Sequence[Expression]]) -> tuple[frozenset[Any], ...]:
    held = _ALTERNATIVE_KEYS.get(id(alternatives))
    if held is not None and held[0] is alternatives:
        return held[1]
    keys = tuple(frozenset(map(_key, alt)) for alt in alternatives)
    if len(_ALTERNATIVE_KEYS) >= 1024:
        _ALTERNATIVE_KEYS.clear()
    _ALTERNATIVE_KEYS[id(alternatives)] = (alternatives, keys)
    return keys


def add_preferred(spec: PodSpec, terms: list[dict[str, Any]]) -> None:
    """Append the `terms` not already present. Takes ownership of `terms` (pass fresh ones)."""
    if not terms:
        return
    node_affinity = _child(_affinity_of(spec), "nodeAffinity")
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    new = [t for t in terms if t not in preferred]
    if new:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [*preferred, *new]


def _expr(key: str, operator: str, values: list[str]) -> Expression:
    return {"key": key, "operator": operator, "values": values}


def _key(expr: Expression) -> tuple[Any, Any, tuple[str, ...]]:
    return (expr.get("key"), expr.get("operator"), tuple(sorted(expr.get("values") or ())))


def _affinity_of(spec: PodSpec) -> dict[str, Any]:
    """spec.affinity as a dict, created when absent or null."""
    value = spec.get("affinity")
    if not isinstance(value, dict):
        value = spec["affinity"] = {}
    return value


def _child(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """parent[key] as a dict, created when absent or null."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = {}
        parent[key] = value
    return value
