"""Which placement warnings a mutated pod gets, and in what order. Never a denial.

In this order:
1. no node fits (`serve --node-cache`); then nothing else about the nodes, since every other
   node warning is about nodes the pod fits;
2. otherwise: the matching nodes' kubelets would refuse the pod (TopologyAffinityError);
   no fitting node has room on one NUMA node now (with `--numa-scheduling`, GPU pods);
   GPU↔NIC pairs not guaranteed on a node it fits (policies that ask for pairs);
3. the policy's scheduler is not running (with `--numa-scheduling`; said with or without
   the node cache, whatever the nodes say).
Each is fitted once (fit.py): `topoplace: ` counted, the pointer to explain kept; each
keeps its kind (kinds.py) for the webhook's count of warnings by kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from webhook.policy.model import PlacementPolicy
from webhook.policy.notes import asks_pairs
from webhook.warnings.facts import NodeFacts
from webhook.warnings.fit import Parts, fitted
from webhook.warnings.hardware import kubelet_refusal_warning, no_fit_warning, pairs_warning
from webhook.warnings.kinds import Fitted
from webhook.warnings.now import free_warning, scheduler_warning

__all__ = ["NodeWarnings", "PlacementWarnings", "node_warnings"]

# (mutated pod, the policy applied) -> the node warnings, fitted (NodeCache.check)
NodeWarnings = Callable[[Mapping[str, Any], PlacementPolicy | None], Sequence[Fitted]]


def node_warnings(facts: NodeFacts) -> list[Fitted]:
    """The warnings about the nodes, fitted, in order (steps 1 and 2 above)."""
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
    return [fitted(parts) for parts in found if parts is not None]


class PlacementWarnings:
    """The webhook's one fit check (webhook/server/admission.py's FitCheck): the node
    warnings, then the scheduler's. `nodes` is the node cache's check (it keeps answers per
    node change), `scheduler_problem` the Lease verdict by scheduler name; either may be
    absent (no `--node-cache`, no `--numa-scheduling`)."""

    def __init__(
        self,
        *,
        nodes: NodeWarnings | None = None,
        scheduler_problem: Callable[[str], str | None] | None = None,
    ) -> None:
        self._nodes = nodes
        self._scheduler_problem = scheduler_problem

    def __call__(self, pod: Mapping[str, Any], policy: PlacementPolicy | None) -> list[Fitted]:
        if policy is None:
            return []
        found = list(self._nodes(pod, policy)) if self._nodes is not None else []
        if self._scheduler_problem is not None:
            parts = scheduler_warning(pod, policy, self._scheduler_problem)
            if parts is not None:
                found.append(fitted(parts))
        return found
