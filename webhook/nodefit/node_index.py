"""Many nodes as bit masks, for the admission-time check: one bit per node, sets are ints.

The webhook's node cache keeps an index of every node's labels, allocatable and taints. A
check (webhook/nodefit/checks.py) becomes a mask of the nodes passing it by OR-ing and
AND-ing a few precomputed masks (label value → nodes, allocatable amount → nodes, taint
set → nodes), so judging a pod against 5,000 nodes costs a handful of big-integer
operations, not 5,000 node visits. `failure` in node_verdict.py is the per-node statement of the
same rules; tests hold the two equal.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

from common.vocabulary import LABEL_PREFIX
from webhook.nodefit.checks import Check, PodPlan
from webhook.nodefit.kubelet_check import topology_failure, topology_key
from webhook.nodefit.node_masks import Assessment, Miss, add_bit, bit_or, clear_bit
from webhook.nodefit.pairs_check import pairs_key
from webhook.nodefit.reasons import has_agent_labels
from webhook.placement_model.filters.nodes import NodeView
from webhook.placement_model.filters.selectors import Requirement, Term, parse_int64
from webhook.placement_model.filters.tolerations import (
    UNSCHEDULABLE_TAINT,
    Taint,
    Toleration,
    tolerates,
)

__all__ = ["NodeIndex"]

_CORDON = Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule")
_NAMES = 3  # node names a warning shows


class NodeIndex:
    def __init__(self, views: Iterable[NodeView] = ()) -> None:
        self._slots: dict[str, int] = {}
        self._views: list[NodeView | None] = []
        self._free: list[int] = []
        self.all = 0
        self._labels: dict[str, dict[str, int]] = {}  # key -> value -> nodes
        self._keys: dict[str, int] = {}  # key -> nodes having it
        self._agent = 0  # nodes with topoplace labels
        self._alloc: dict[str, dict[int, int]] = {}  # resource -> amount -> nodes
        self._taints: dict[tuple[Taint, ...], int] = {}
        self._cordoned = 0
        self._unsized = 0  # nodes whose allocatable is not known: not held to requests
        # topology_key -> nodes: nodes alike for the kubelet's topology admission
        self._aligning: dict[tuple[object, ...], int] = {}
        self._pairing: dict[tuple[object, ...], int] = {}  # pairs_key -> nodes
        self.generation = 0  # bumped by every change that can move a verdict
        self._masks: tuple[int, dict[int, tuple[Requirement, int]]] = (0, {})
        for view in views:
            self.upsert(view)

    def __len__(self) -> int:
        return len(self._slots)

    def views(self) -> list[NodeView]:
        return [v for v in self._views if v is not None]

    def upsert(self, view: NodeView) -> bool:
        """Add or replace a node; False when nothing that matters changed."""
        slot = self._slots.get(view.name)
        if slot is not None:
            if self._views[slot] == view:
                return False
            self._index(self._views[slot], 1 << slot, add=False)  # type: ignore[arg-type]
        else:
            slot = self._free.pop() if self._free else len(self._views)
            if slot == len(self._views):
                self._views.append(None)
            self._slots[view.name] = slot
        self._views[slot] = view
        self._index(view, 1 << slot, add=True)
        self.generation += 1
        return True

    def remove(self, name: str) -> bool:
        slot = self._slots.pop(name, None)
        if slot is None:
            return False
        view = self._views[slot]
        if view is None:
            raise KeyError(f"node {name}: slot {slot} holds no view")
        self._index(view, 1 << slot, add=False)
        self._views[slot] = None
        self._free.append(slot)
        self.generation += 1
        return True

    def _index(self, view: NodeView, bit: int, *, add: bool) -> None:
        put = add_bit if add else clear_bit
        for key, value in view.labels.items():
            put(self._labels.setdefault(key, {}), value, bit)
            if not self._labels[key]:
                del self._labels[key]
            put(self._keys, key, bit)
        for resource, amount in view.allocatable.items():
            put(self._alloc.setdefault(resource, {}), amount, bit)
            if not self._alloc[resource]:
                del self._alloc[resource]
        put(self._taints, view.taints, bit)
        aligning = topology_key(view)
        if aligning is not None:
            put(self._aligning, aligning, bit)
        put(self._pairing, pairs_key(view.labels, view.pairing), bit)
        if add:
            self.all |= bit
            self._agent |= bit if has_agent_labels(view.labels) else 0
            self._cordoned |= bit if view.unschedulable else 0
            self._unsized |= 0 if view.resources_known else bit
        else:
            self.all &= ~bit
            self._agent &= ~bit
            self._cordoned &= ~bit
            self._unsized &= ~bit

    # --- masks ------------------------------------------------------------------------------
    def requirement(self, req: Requirement) -> int:
        # Policy pods ask the same few requirements (their kubelet-shape terms, the policy's
        # expressions) again and again: masks are kept until the index changes.
        # By identity: parsing hands out one object per distinct requirement (its cache),
        # and the entry holds it, so the id cannot be reused while it is kept.
        if self._masks[0] != self.generation:
            self._masks = (self.generation, {})
        held = self._masks[1].get(id(req))
        if held is not None and held[0] is req:
            return held[1]
        if len(self._masks[1]) >= 8192:
            self._masks[1].clear()
        found = self._requirement(req)
        self._masks[1][id(req)] = (req, found)
        return found

    def _requirement(self, req: Requirement) -> int:
        if req.error is not None:
            return 0
        if req.field:
            slot = self._slots.get(req.values[0]) if req.key == "metadata.name" else None
            named = 1 << slot if slot is not None else 0
            return named if req.operator == "In" else self.all & ~named
        values = self._labels.get(req.key, {})
        op = req.operator
        if op in ("In", "NotIn"):
            chosen = bit_or(values.get(v, 0) for v in req.values)
            return chosen if op == "In" else self.all & ~chosen
        if op in ("Exists", "DoesNotExist"):
            having = self._keys.get(req.key, 0)
            return having if op == "Exists" else self.all & ~having
        wanted = req.number
        if wanted is None:
            raise ValueError(f"requirement {req.key} {op} without a number")
        return bit_or(
            mask
            for value, mask in values.items()
            if (n := parse_int64(value)) is not None and (n > wanted if op == "Gt" else n < wanted)
        )

    def term(self, term: Term) -> int:
        if not term.valid:
            return 0
        mask = self.all
        for req in term.requirements:
            mask &= self.requirement(req)
        return mask

    def _tolerated(self, tolerations: tuple[Toleration, ...]) -> int:
        return bit_or(
            mask
            for taints, mask in self._taints.items()
            if all(tolerates(tolerations, t) for t in taints)
        )

    def _resource(self, resource: str, need: int) -> int:
        amounts = self._alloc.get(resource, {})
        enough = bit_or(mask for amount, mask in amounts.items() if amount >= need)
        if resource == "pods":  # as node_verdict.py: a node that does not say is not held to it
            enough |= self.all & ~bit_or(amounts.values())
        return enough | self._unsized

    def mask(self, check: Check) -> int:
        """The nodes passing `check`."""
        kind = check.kind
        if kind == "name":
            slot = self._slots.get(check.node_name)
            return 1 << slot if slot is not None else 0
        if kind == "agent":
            return self._agent
        if kind == "policy":
            if check.requirement is None:
                raise ValueError(f"policy check {check.group!r} without its requirement")
            return self.requirement(check.requirement)
        if kind in ("affinity", "shape"):
            return bit_or(self.term(t) for t in check.terms)
        if kind == "selector":
            mask = self.all
            for key, value in check.selector:
                mask &= self._labels.get(key, {}).get(value, 0)
            return mask
        if kind == "cordon":
            return self.all if tolerates(check.tolerations, _CORDON) else self.all & ~self._cordoned
        if kind == "taints":
            return self._tolerated(check.tolerations)
        return self._resource(check.resource, check.need)

    def _passing(self, check: Check, plan: PodPlan, candidates: int) -> int:
        """The nodes among `candidates` passing `check`. The kubelet's topology admission
        depends on the whole pod: it is judged once per group of nodes alike for it (one
        machine class and kubelet config), on one node of the group."""
        if check.kind != "topology":
            return self.mask(check)
        failing = 0
        for group in self._aligning.values():
            if group & candidates:
                _, view = next(self._views_in(group & candidates))
                if topology_failure(check, view, plan) is not None:
                    failing |= group
        return candidates & ~failing

    def _views_in(self, mask: int) -> Iterator[tuple[int, NodeView]]:
        """(bit, view) of each node in `mask`."""
        while mask:
            bit = mask & -mask
            mask ^= bit
            view = self._views[bit.bit_length() - 1]
            if view is not None:
                yield bit, view

    def _admitted(self, plan: PodPlan) -> tuple[int, int]:
        """(nodes passing every check, nodes kube-scheduler would accept): the second also
        holds those whose kubelet would refuse the pod. The kubelet check comes last, on
        what the scheduler's checks left."""
        remaining = self.all
        kubelet = None
        for check in plan.checks:
            if check.kind == "topology":
                kubelet = check
                continue
            remaining &= self.mask(check)
            if not remaining:
                return 0, 0
        if kubelet is None:
            return remaining, remaining
        return remaining & self._passing(kubelet, plan, remaining), remaining

    def fit(self, plan: PodPlan) -> tuple[bool, list[str]]:
        """Whether any node passes every check, and the nodes kube-scheduler would bind the
        pod to whose kubelet would refuse it at admission (the Topology Manager): the
        scheduler cannot tell those from the rest. One pass for the admission warning."""
        admitted, schedulable = self._admitted(plan)
        refusing = sorted(view.name for _, view in self._views_in(schedulable & ~admitted))
        return bool(admitted), refusing

    def fits_somewhere(self, plan: PodPlan) -> bool:
        """Whether any node passes every check (the common case: no reasons gathered)."""
        return bool(self._admitted(plan)[0])

    def refusing_kubelets(self, plan: PodPlan) -> list[str]:
        return self.fit(plan)[1]

    def admitted_names(self, plan: PodPlan) -> Iterator[str]:
        """The nodes that pass every check, by name, lazily: a caller looking for one with
        room now stops at the first."""
        return (view.name for _, view in self._views_in(self._admitted(plan)[0]))

    def pair_groups(self, plan: PodPlan) -> list[tuple[NodeView, int, list[str]]]:
        """The nodes the pod fits, in groups alike for the GPU↔NIC pairs verdict: one view of
        each group, how many nodes it has and the first few names."""
        admitted = self._admitted(plan)[0]
        groups = []
        for mask in self._pairing.values():
            fitting = mask & admitted
            if fitting:
                views = [view for _, view in itertools.islice(self._views_in(fitting), _NAMES)]
                groups.append((views[0], fitting.bit_count(), [v.name for v in views]))
        return groups

    def assess(self, plan: PodPlan) -> Assessment:
        """How many nodes fit, and for the rest, their first failing check and its values."""
        remaining = self.all
        misses: list[Miss] = []
        for check in plan.checks:
            passing = self._passing(check, plan, remaining)
            failing = remaining & ~passing
            if failing:
                misses.append(Miss(check, failing.bit_count(), self._values(check, failing)))
                remaining &= passing
        return Assessment(remaining.bit_count(), tuple(misses))

    def _values(self, check: Check, failing: int) -> tuple[str, ...]:
        """What the failing nodes have for a label or resource check (a few, sorted)."""
        if check.kind == "policy" and check.requirement is not None:
            key = check.requirement.key
            found = sorted(v for v, m in self._labels.get(key, {}).items() if m & failing)
            if failing & ~self._keys.get(key, 0):
                found.append("absent")
            return tuple(found)
        if check.kind == "shape":
            return self._absent(check, failing)
        if check.kind == "resource":
            amounts = self._alloc.get(check.resource, {})
            held = sorted(a for a, m in amounts.items() if m & failing)
            shown = [str(a) for a in held]
            if failing & ~bit_or(amounts.values()):
                shown.insert(0, "0")
            return tuple(shown)
        return ()

    def _absent(self, check: Check, failing: int) -> tuple[str, ...]:
        """Labels the kubelet-shape terms read that failing nodes lack (an older agent)."""
        found = []
        for key in sorted({r.key for t in check.terms for r in t.requirements}):
            if lacking := failing & ~self._keys.get(key, 0):
                names = [v.name for _, v in itertools.islice(self._views_in(lacking), 2)]
                more = ", …" if lacking.bit_count() > len(names) else ""
                found.append(f"no {key.removeprefix(LABEL_PREFIX)} on {', '.join(names)}{more}")
        return tuple(found)
