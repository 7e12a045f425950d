"""The kubelet's Topology Manager merge: would it admit these units on this capacity, and which
NUMA nodes would each get. One model, for an idle node (the hardware) and for a node now
(a NodeResourceTopology's available counts) alike.

What the real kubelet does (pkg/kubelet/cm/topologymanager, and what make cluster showed on
kubelet v1.37.2): each hint provider offers every NUMA set with enough free for its request,
and calls a set preferred only when it is as narrow as the narrowest set that could ever hold
the request (counted on everything the provider has, free or not). A merged hint is
preferred only when every provider chose the *same* set, each preferred. `restricted` and
`single-numa-node` refuse a unit whose best merged hint is not preferred
(TopologyAffinityError); `single-numa-node` keeps only one-NUMA-node hints. Among equally
narrow preferred sets the kubelet takes the lowest-numbered (with `prefer-closest-numa-nodes`
the closest; the model, without distances, takes the lowest: admission is the same). Units
are judged in order and each takes its share from its set, lowest NUMA node first; what an
ordinary init container took returns before the next unit (the managers reuse it).

NUMA nodes without CPUs (a Grace GPU's HBM, a CXL expander; docs/memory-only-numa.md) count
like any other: against `max-allowable-numa-nodes` (past it an aligning kubelet does not
start), and in the Static memory manager's hints, whose search walks every subset of the
machine's NUMA nodes for each Guaranteed pod, under any policy. Sets are searched here only
over the NUMA nodes that hold some of what a unit asks (a set with a node holding none is never
the narrowest), so the model's cost is bounded by those nodes, never by the empty ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from webhook.placement_model.kubelet import KubeletConfig
from webhook.placement_model.numa_shape import Capacity
from webhook.placement_model.requests import Unit

__all__ = ["HINT_SEARCH_NODES", "STATIC_MEMORY_SEARCH_NODES", "Admission", "Taken", "admit",
           "min_nodes", "resource_word", "show_amount"]  # fmt: skip

# The model's own search: past 20 NUMA nodes holding what a unit asks it stops and takes the
# pod as refused (no machine known has more: a Xeon Max in flat mode 16, a GB200 tray 6).
HINT_SEARCH_NODES = 20
# The Static memory manager walks all 2^N subsets of the machine's N NUMA nodes for each
# Guaranteed pod. Real kubelets v1.37.2 on GB200 trays (make cluster,
# tests/e2e/test_memory_only_static_search.py): admitted after 0.9 s on 14 NUMA nodes, 4 s on
# 18, 51 s (30 s of CPU, 1.1 GiB) on 22; no answer on 34 after 129 s and 3 GiB. Each node more
# doubles both, so past 24 (minutes of CPU, GiBs per pod; 34: some 35 hours, 400 GiB) the
# model takes it as an admission that never comes.
STATIC_MEMORY_SEARCH_NODES = 24
# Per aligned resource (sorted by name), what the pod keeps on each NUMA node, in the units
# Capacity counts (CPU in millicores): the kubelet's own choice of NUMA set, as admit() makes it.
Taken = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class Admission:
    """admitted: the kubelet's Topology Manager admits every unit. reason: why not.
    tightness: the share of the chosen NUMA nodes' free GPUs the pod takes (1.0: exact).
    taken: what the admitted pod holds per NUMA node once its init containers are done."""

    admitted: bool
    reason: str | None = None
    tightness: float = 0.0
    taken: Taken = ()


def min_nodes(need: int, caps: Sequence[int]) -> int | None:
    """The fewest NUMA nodes that could ever hold `need` (None: not even all of them)."""
    total = 0
    for count, cap in enumerate(sorted(caps, reverse=True), start=1):
        total += cap
        if total >= need:
            return count
    return None


def resource_word(name: str, count: int | None = None) -> str:
    """How a reason names a resource: GPUs, CPUs, memory, or the extended resource name."""
    if name.endswith("/gpu"):
        return "GPU" if count == 1 else "GPUs"
    if name == "cpu":
        return "CPU" if count == 1 else "CPUs"
    return name


def show_amount(name: str, units: int) -> str:
    if name == "cpu":
        return f"{units / 1000:g}"
    if name == "memory" or name.startswith("hugepages-"):
        return f"{units / 2**30:.0f}Gi"
    return str(units)


def _asks(unit: Mapping[str, int], names: Sequence[str]) -> str:
    parts = [f"{show_amount(n, unit[n])} {resource_word(n, unit[n])}" for n in names]
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _hinted(config: KubeletConfig, capacity: Capacity, unit: Mapping[str, int]) -> list[str]:
    """The resources of `unit` a hint provider aligns on this node."""
    names = []
    for name, need in unit.items():
        if need <= 0 or name not in capacity.width or not any(capacity.width[name]):
            continue
        if name == "cpu" and not config.static_cpu:
            continue
        if (name == "memory" or name.startswith("hugepages-")) and not config.static_memory:
            continue
        names.append(name)
    return sorted(names, key=lambda n: (n in ("cpu", "memory"), n))


Refusal = tuple[str | None, tuple[int, ...]]


def _refusal(config: KubeletConfig, capacity: Capacity, unit: Mapping[str, int],
             names: Sequence[str], free: Mapping[str, list[int]],
             reuse: Mapping[str, frozenset[int]]) -> Refusal:  # fmt: skip
    """(why the unit is refused, None if not; the NUMA set it gets when admitted). `reuse`:
    per device resource, the NUMA nodes of an init container's devices this container takes
    over: the device manager offers only sets holding all of them (make cluster: 5 GPUs in an
    init container on NUMA nodes 0 and 1, then 1 GPU in the app container: refused under
    restricted, as no set of one NUMA node is offered)."""
    widths = {}
    for name in names:
        if sum(free[name]) < unit[name]:
            have = show_amount(name, sum(free[name]))
            return f"{_asks(unit, [name])} asked, {have} free on the whole node", ()
        widths[name] = min_nodes(unit[name], capacity.width[name]) or capacity.nodes
    if config.policy == "single-numa-node":
        wide = [n for n in names if widths[n] > 1]
        if wide:
            return "; ".join(f"{_asks(unit, [n])} need {widths[n]} NUMA nodes" for n in wide), ()
        width = 1
    else:
        if len(set(widths.values())) > 1:
            widest = max(widths.values())
            spans = [n for n in names if widths[n] == widest]
            narrow = [f"{_asks(unit, [n])} fit in {widths[n]}" for n in names if widths[n] < widest]
            return (
                f"{_asks(unit, spans)} span {widest} NUMA nodes but {', '.join(narrow)}: "
                "no NUMA set is the narrowest for every resource"
            ), ()
        width = next(iter(widths.values()))
    blocked = False
    holding = [i for i in range(capacity.nodes) if any(capacity.width[n][i] for n in names)]
    if len(holding) > HINT_SEARCH_NODES:
        return (
            f"{len(holding)} NUMA nodes hold {_asks(unit, names)}: past {HINT_SEARCH_NODES} "
            f"the model does not search the 2^{len(holding)} NUMA sets the kubelet's hint "
            "providers walk, and takes the pod as refused"
        ), ()
    for mask in itertools.combinations(holding, width):
        if all(sum(free[n][i] for i in mask) >= unit[n] for n in names) and all(
            _groups_allow(n, mask, free, capacity) for n in names
        ):
            if all(reuse.get(n, frozenset()) <= set(mask) for n in names):
                return None, mask
            blocked = True
    if blocked:
        held = next((n for n in names if reuse.get(n)), names[0])
        where = ", ".join(map(str, sorted(reuse.get(held, ()))))
        return (
            f"{_asks(unit, names)} fit in {width} NUMA node{'s' if width > 1 else ''}, but the "
            f"{resource_word(held)} it takes over from an init container are on NUMA nodes "
            f"{where}"
        ), ()
    where = "no NUMA node has" if width == 1 else f"no {width} NUMA nodes have"
    if len(names) == 1:
        (name,) = names
        shown = ", ".join(show_amount(name, v) for v in free[name])
        word = resource_word(name, unit[name])
        return f"{where} {show_amount(name, unit[name])} free {word} (free: {shown})", ()
    per = "; ".join(
        f"{resource_word(n)} {', '.join(show_amount(n, v) for v in free[n])}" for n in names
    )
    return f"{where} {_asks(unit, names)} free together (free per NUMA node: {per})", ()


def _memory(name: str) -> bool:
    return name == "memory" or name.startswith("hugepages-")


def _groups_allow(name: str, mask: tuple[int, ...], free: Mapping[str, list[int]],
                  capacity: Capacity) -> bool:  # fmt: skip
    """The Static memory manager never mixes a single-NUMA allocation and a multi-NUMA group
    on one NUMA node (make cluster: a pod's memory across NUMA nodes 0 and 1 is refused while
    another pod holds memory on NUMA node 0 alone). Seen from the counts: a set of several
    NUMA nodes is usable only where none holds memory yet. (A node in a multi-NUMA group
    refused for a single-NUMA allocation cannot be told from counts.)"""
    if not _memory(name) or len(mask) == 1:
        return True
    return all(free[name][i] >= capacity.width[name][i] for i in mask)


def _memory_refusal(capacity: Capacity, units: Sequence[Unit]) -> str | None:
    """Under a policy that does not align, the Static memory manager still places each
    Guaranteed unit's memory, narrowest set first, or fails the pod at admission
    (UnexpectedAdmissionError)."""
    free = {name: list(counts) for name, counts in capacity.free.items()}
    for unit in units:
        for name, need in unit.amounts.items():
            if not _memory(name) or name not in capacity.width or need <= 0:
                continue
            holding = [i for i in range(capacity.nodes) if capacity.width[name][i]]
            masks = (
                m
                for width in range(1, len(holding) + 1)
                for m in itertools.combinations(holding, width)
            ) if sum(free[name]) >= need else iter(())  # fmt: skip
            mask = next((m for m in masks if sum(free[name][i] for i in m) >= need
                         and _groups_allow(name, m, free, capacity)), None)  # fmt: skip
            if mask is None:
                shown = ", ".join(show_amount(name, v) for v in free[name])
                return (
                    f"the Static memory manager has no NUMA set for {show_amount(name, need)} "
                    f"{name} (free: {shown}; NUMA nodes holding memory join no other set)"
                )
            left = need if unit.keeps else 0
            for i in mask:
                took = min(left, free[name][i])
                free[name][i] -= took
                left -= took
    return None


def admit(config: KubeletConfig, capacity: Capacity, units: Sequence[Unit]) -> Admission:
    """Whether the kubelet under `config` admits `units` on `capacity` (see the module doc)."""
    if capacity.nodes == 0:
        return Admission(True)
    # Only a unit whose memory the manager places (a Guaranteed pod's) starts the search:
    # a Burstable pod gets no memory hints and is admitted (make cluster, 34 NUMA nodes).
    asks_memory = any(_memory(n) and v > 0 for u in units for n, v in u.amounts.items())
    if config.static_memory and asks_memory and capacity.nodes > STATIC_MEMORY_SEARCH_NODES:
        return Admission(False, (
            f"{capacity.nodes} NUMA nodes (those without CPUs too): the Static memory manager "
            f"searches 2^{capacity.nodes} NUMA sets for each pod and does not answer "
            "(memory-manager-policy None, or the GPU driver in CDMM mode, avoids it)"
        ))  # fmt: skip
    if not config.aligning:
        reason = _memory_refusal(capacity, units) if config.static_memory else None
        return Admission(reason is None, reason)
    if capacity.nodes > config.max_numa_nodes:
        return Admission(False, (
            f"{capacity.nodes} NUMA nodes (those without CPUs too), more than "
            f"topology-manager-max-allowable-numa-nodes {config.max_numa_nodes}: the kubelet "
            f"does not start with this policy; set max-allowable-numa-nodes to "
            f"{capacity.nodes} or more"
        ))  # fmt: skip
    free = {name: list(counts) for name, counts in capacity.free.items()}
    start = {name: tuple(counts) for name, counts in free.items()}
    reuse: dict[str, frozenset[int]] = {}  # device resource -> NUMA nodes an init container held
    taken = given = 0
    for unit in units:
        names = _hinted(config, capacity, unit.amounts)
        if not names:
            continue
        reason, mask = _refusal(config, capacity, unit.amounts, names, free, reuse)
        if reason is not None:
            return Admission(False, reason)
        gpu = next((n for n in names if n.endswith("/gpu")), names[0])
        taken += unit.amounts[gpu]
        given += sum(free[gpu][i] for i in mask)
        for name in names:
            left, held = unit.amounts[name], set()
            for i in mask:
                took = min(left, free[name][i])
                if took:
                    held.add(i)
                if unit.keeps:
                    free[name][i] -= took
                left -= took
            if "/" in name:  # devices: the next container takes over an init container's
                if unit.keeps:
                    reuse.pop(name, None)
                else:
                    reuse[name] = frozenset(held)
    kept: Taken = tuple(
        (name, tuple(a - b for a, b in zip(start[name], counts, strict=True)))
        for name, counts in sorted(free.items())
        if tuple(counts) != start[name]
    )
    return Admission(True, tightness=taken / given if given else 0.0, taken=kept)
