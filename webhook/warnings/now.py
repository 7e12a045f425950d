"""The warnings about what is wrong *now*, with `--numa-scheduling`: no node that fits the
hardware has room on one NUMA node (NodeResourceTopology), and the scheduler the policy
sends the pod to is not running (its Lease, webhook/scheduler/leases.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from webhook.nodefit.checks import PodPlan
from webhook.nodefit.free_check import StaleOf, ZonesOf, free_refusal
from webhook.policy.model import PlacementPolicy
from webhook.warnings.kinds import WarningKind
from webhook.warnings.lines import Parts

__all__ = ["NoRoom", "free_warning", "no_room", "scheduler_warning", "stale_room"]


@dataclass(frozen=True, slots=True)
class NoRoom:
    """Every node that fits the hardware lacks room now: how many, and the first one's why."""

    nodes: int
    node: str
    reason: str  # free_refusal's, `now: ` taken off


def no_room(plan: PodPlan, matching: Iterable[str], zones_of: ZonesOf) -> NoRoom | None:
    """None when a node has room, or one has no NodeResourceTopology to tell. `matching` is
    read only up to the first node with room: on a cluster with room, that is the first."""
    count = 0
    first: tuple[str, str] | None = None
    for name in matching:
        reason = free_refusal(plan, zones_of(name))
        if reason is None:
            return None
        count += 1
        first = first or (name, reason.removeprefix("now: "))
    return None if first is None else NoRoom(count, *first)


def stale_room(found: NoRoom | None, stale: StaleOf | None) -> NoRoom | None:
    """The first node's reason names its object out of date, when the extender says so (the
    pod may wait on counts the agent has not corrected)."""
    if found is None or stale is None or (late := stale(found.node)) is None:
        return found
    return replace(found, reason=f"{found.reason}; {late}")


def free_warning(plan: PodPlan, found: NoRoom | None) -> Parts | None:
    if found is None or plan.policy is None:
        return None
    many = found.nodes != 1
    # The node's name is the item: a long one is cut, or `…` stands for it; the reason stays.
    return Parts(
        kind=WarningKind.NO_ROOM,
        head=f"placement policy {plan.policy}: {'none of the' if many else 'the'} "
        f"{found.nodes} matching node{'s' if many else ''} {'has' if many else 'has no'} "
        "room on one NUMA node now (",
        items=(found.node,),
        after=f": {found.reason}); the pod waits for a NUMA node to free, or its kubelet "
        "refuses it",
    )


def scheduler_warning(
    pod: Mapping[str, Any], policy: PlacementPolicy, problem_of: Callable[[str], str | None]
) -> Parts | None:
    """The pod goes to the policy's scheduler, and that scheduler is not running."""
    name = policy.spec.placement.numa_aware_scheduler
    if name is None or (pod.get("spec") or {}).get("schedulerName") != name:
        return None
    problem = problem_of(name)
    if problem is None:
        return None
    # What it means is kept whole; a long scheduler name shortens the problem instead.
    return Parts(
        kind=WarningKind.SCHEDULER,
        head=problem,
        tail=": the pod stays Pending until it runs (placement.numaAwareScheduler)",
    )
