"""What the node cache knows about where a mutated pod can go, asked one fact at a time:
`placement.node_warnings` asks only for what the warnings it may give need (on a cluster
where the pod fits, the no-fit assessment is never made)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from webhook.nodefit.checks import PodPlan
from webhook.nodefit.free_check import StaleOf, ZonesOf
from webhook.nodefit.node_index import NodeIndex
from webhook.nodefit.node_masks import Assessment
from webhook.nodefit.pairs_check import pairs_verdict
from webhook.policy.model import PlacementPolicy
from webhook.warnings.hardware import PairsGroup
from webhook.warnings.now import NoRoom, no_room, stale_room

__all__ = ["IndexFacts", "NodeFacts"]


class NodeFacts(Protocol):
    @property
    def plan(self) -> PodPlan: ...

    @property
    def policy(self) -> PlacementPolicy: ...

    def nodes(self) -> int:
        """How many nodes are known."""
        ...

    def fit(self) -> tuple[bool, Sequence[str]]:
        """Whether some node fits; the matching nodes whose kubelets would refuse the pod."""
        ...

    def assessment(self) -> Assessment:
        """Each check's failing nodes, for a pod that fits none."""
        ...

    def no_room(self) -> NoRoom | None:
        """Every fitting node lacks room on one NUMA node now (None: one has, or unknown)."""
        ...

    def pair_groups(self) -> Sequence[PairsGroup]:
        """The GPU↔NIC pairs verdict of each group of alike fitting nodes."""
        ...


class IndexFacts:
    """The facts from the node cache's index and the free capacity per NUMA node."""

    def __init__(
        self,
        index: NodeIndex,
        plan: PodPlan,
        policy: PlacementPolicy,
        zones_of: ZonesOf | None,
        stale: StaleOf | None = None,
    ) -> None:
        self._index = index
        self._plan = plan
        self._policy = policy
        self._zones_of = zones_of
        self._stale = stale

    @property
    def plan(self) -> PodPlan:
        return self._plan

    @property
    def policy(self) -> PlacementPolicy:
        return self._policy

    def nodes(self) -> int:
        return len(self._index)

    def fit(self) -> tuple[bool, Sequence[str]]:
        return self._index.fit(self._plan)

    def assessment(self) -> Assessment:
        return self._index.assess(self._plan)

    def no_room(self) -> NoRoom | None:
        if self._zones_of is None:  # no --numa-scheduling: nothing known about now
            return None
        found = no_room(self._plan, self._index.admitted_names(self._plan), self._zones_of)
        return stale_room(found, self._stale)

    def pair_groups(self) -> Sequence[PairsGroup]:
        plan, policy = self._plan, self._policy
        return [
            (verdict, count, names)
            for view, count, names in self._index.pair_groups(plan)
            if (verdict := pairs_verdict(policy, plan, view.labels, view.pairing))
        ]
