"""Which placement warnings a mutated pod gets, and in what order. Never a denial.

In this order:
1. no node fits (`serve --node-cache`); then nothing else about the nodes, since every other
   node warning is about nodes the pod fits;
2. otherwise: the matching nodes' kubelets would refuse the pod (TopologyAffinityError);
   no fitting node has room on one NUMA node now (with `--numa-scheduling`, GPU pods);
   GPU↔NIC pairs not guaranteed on a node it fits (policies that ask for pairs);
3. the policy's scheduler is not running (with `--numa-scheduling`; said with or without
   the node cache, whatever the nodes say).
Each is shortened once (lines.py): `topoplace: ` counted, the pointer to explain kept; each
keeps its kind (kinds.py) for the webhook's count of warnings by kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from webhook import jsonio
from webhook.nodefit.checks import plan_for
from webhook.nodefit.node_index import NodeIndex
from webhook.placement_model.zones import NodeZones
from webhook.policy.model import PlacementPolicy
from webhook.policy.notes import asks_pairs
from webhook.warnings.facts import IndexFacts, NodeFacts
from webhook.warnings.hardware import kubelet_refusal_warning, no_fit_warning, pairs_warning
from webhook.warnings.kinds import WarningLine
from webhook.warnings.lines import Parts, as_line
from webhook.warnings.now import free_warning, scheduler_warning

__all__ = ["NodeSource", "PlacementWarnings", "StaleSource", "ZoneSource", "node_warnings"]


class NodeSource(Protocol):
    """Every node, as a plain store keeps it (webhook/stores/node_store.py)."""

    ready: bool  # the first list is in
    index: NodeIndex


class StaleSource(Protocol):
    """The extender's ledger (webhook/scheduler/accounting.py): why a node's object is out
    of date, and a count that moves whenever one more or one less is."""

    def stale(self, node: str) -> str | None: ...

    def stale_count(self) -> int: ...


class ZoneSource(Protocol):
    """Free capacity per NUMA node (webhook/scheduler/nrt_cache.py)."""

    generation: int

    def get(self, node: str) -> NodeZones | None: ...


_ANSWERS_MAX = 1024
# What a verdict depends on in a mutated pod (besides the policy, compared by identity).
_SPEC_KEYS = ("affinity", "nodeSelector", "tolerations", "nodeName", "overhead", "resources")


def _signature(pod: Mapping[str, Any]) -> bytes:
    spec = pod.get("spec") or {}
    containers = [
        (c.get("resources"), c.get("restartPolicy"))
        for key in ("initContainers", "containers")
        for c in spec.get(key) or ()
    ]
    return jsonio.dumps([[spec.get(k) for k in _SPEC_KEYS], containers])


def node_warnings(facts: NodeFacts) -> list[WarningLine]:
    """The warnings about the nodes, shortened, in order (steps 1 and 2 above)."""
    plan = facts.plan
    found: list[Parts | None] = []
    if facts.nodes():
        fits, refusing = facts.fit()
        if not fits:
            found.append(no_fit_warning(plan, facts.assessment(), facts.nodes()))
        else:
            found.append(kubelet_refusal_warning(plan, refusing))
            if plan.gpus > 0:
                found.append(free_warning(plan, facts.no_room()))
            if asks_pairs(facts.policy):
                found.append(pairs_warning(plan, facts.pair_groups()))
    return [as_line(parts) for parts in found if parts is not None]


class PlacementWarnings:
    """The webhook's one fit evaluation at admission: the node warnings, then the scheduler's.

    It reads the node store (`nodes`) and the free capacity per NUMA node (`zones`) as plain
    stores, and the Lease verdict by scheduler name (`scheduler_problem`); any may be absent
    (no `--node-cache`, no `--numa-scheduling`). The pods of one Job are alike: each shape is
    judged once per node change, the answer kept until the index or the zones move.
    """

    def __init__(
        self,
        *,
        nodes: NodeSource | None = None,
        zones: ZoneSource | None = None,
        stale: StaleSource | None = None,
        scheduler_problem: Callable[[str], str | None] | None = None,
    ) -> None:
        self._nodes = nodes
        self._zones = zones
        self._stale = stale
        self._scheduler_problem = scheduler_problem
        # pod signature -> (policy, index, its generation, the zones' and the stale count, the
        # answer then)
        self._answers: dict[
            bytes, tuple[PlacementPolicy, NodeIndex, tuple[int, int, int], tuple[WarningLine, ...]]
        ] = {}

    def __call__(self, pod: Mapping[str, Any], policy: PlacementPolicy | None) -> list[WarningLine]:
        if policy is None:
            return []
        found = self._node_warnings(pod, policy)
        if self._scheduler_problem is not None:
            parts = scheduler_warning(pod, policy, self._scheduler_problem)
            if parts is not None:
                found.append(as_line(parts))
        return found

    def _node_warnings(self, pod: Mapping[str, Any], policy: PlacementPolicy) -> list[WarningLine]:
        """None until the store's first list is in."""
        nodes = self._nodes
        if nodes is None or not nodes.ready:
            return []
        index, zones, stale = nodes.index, self._zones, self._stale
        generation = (
            index.generation,
            zones.generation if zones is not None else 0,
            stale.stale_count() if stale is not None else 0,
        )
        key = _signature(pod)
        known = self._answers.get(key)
        # The same policy object and index (a reload or relist makes new ones), unchanged since.
        if (
            known is not None
            and known[0] is policy
            and known[1] is index
            and known[2] == generation
        ):
            return list(known[3])
        zones_of = zones.get if zones is not None else None
        stale_of = stale.stale if stale is not None else None
        facts = IndexFacts(index, plan_for(pod, policy), policy, zones_of, stale_of)
        warnings = tuple(node_warnings(facts))
        if len(self._answers) >= _ANSWERS_MAX:
            self._answers.clear()
        self._answers[key] = (policy, index, generation, warnings)
        return list(warnings)
