"""The NUMA-aware scheduling side of the webhook (`serve --numa-scheduling`), in one piece:
the NodeResourceTopology watch, the bound pods' watch and the ledger over both
(accounting.py), the extender routes over the ledger, and the Lease check behind the
admission warning for a policy whose scheduler is not running (worded in webhook/warnings)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any

from aiohttp import web

from webhook.policy.loader import PolicySet
from webhook.scheduler.accounting import Ledger
from webhook.scheduler.leases import SchedulerLeases
from webhook.scheduler.locality import policy_weight
from webhook.scheduler.nrt_cache import NrtCache
from webhook.scheduler.pods import BoundPods
from webhook.scheduler.routes import add_routes

__all__ = ["NumaScheduling"]


def _named(policies: PolicySet | None) -> Iterable[str]:
    if policies is None:
        return
    for name in policies.names:
        scheduler = policies[name].spec.placement.numa_aware_scheduler
        if scheduler is not None:
            yield scheduler


class NumaScheduling:
    def __init__(
        self,
        policies: Callable[[], PolicySet | None],
        *,
        lease_interval: float = 10.0,
        on_prediction: Callable[[str], None] = lambda _outcome: None,
        accounting: bool = True,
    ):
        self.zones = NrtCache()
        self._policies = policies
        self.ledger = Ledger(self.zones, on_outcome=on_prediction)
        self.zones.on_change = self.ledger.nrt_changed
        self.pods = BoundPods(self.ledger)
        # Off (`--no-scheduler-accounting`, to measure): no bound pods are watched, so the
        # ledger stays empty and never ready: no hold, no wait, the object's counts alone.
        self._accounting = accounting
        self.leases = SchedulerLeases(lambda: _named(policies()), interval=lease_interval)

    def add_routes(self, app: web.Application) -> None:
        add_routes(app, self.ledger, policy_weight(self._policies))

    def tasks(self, kubeconfig: Path | None) -> list[Coroutine[Any, Any, None]]:
        tasks = [self.zones.run(kubeconfig), self.leases.run(kubeconfig)]
        if self._accounting:
            tasks.append(self.pods.run(kubeconfig))
        return tasks

    def stamp(self) -> tuple[object, ...]:
        """Changes whenever the scheduler warning or the node cache's free-capacity check
        could answer differently: a NodeResourceTopology event, a scheduler Lease's verdict."""
        return (self.zones.generation, self.leases.generation)
