"""The pods the extender passed that do not show bound yet, and the wait they cost the next
filter.

kube-scheduler binds a pod in the background while it already asks about the next one, so
the bind can show in the watch (accounting.py) after the next filter. That filter waits, at
most `hold_s`, but only when it matters: when some node it asks about would judge the pod
otherwise had the pods in flight all landed there (each where the kubelet puts it). A burst
on one node waits for each bind; pods spread over a fleet with room to spare do not.
Looking costs one dictionary look-up per node asked about, and one fit per alike class.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from webhook.placement_model.free_now import free_fit, less_taken
from webhook.placement_model.kubelet_admission import PodUnits
from webhook.placement_model.zones import NodeZones

__all__ = ["HOLD_S", "InFlight"]

HOLD_S = 1.0  # well under kube-scheduler's extender httpTimeout (5 s)


@dataclass(frozen=True, slots=True)
class _Passed:
    at: float
    units: PodUnits
    nodes: frozenset[str]  # the nodes it passed on (kube-scheduler binds it to one of them)


class InFlight:
    def __init__(
        self,
        table: Callable[[], Mapping[str, NodeZones]],
        overlay: Mapping[str, NodeZones],
        *,
        clock: Callable[[], float],
        hold_s: float = HOLD_S,
    ):
        self._table = table  # node -> zones as published (the cache's current dict)
        self._overlay = overlay  # node -> zones less pending shares, where some are
        self._clock = clock
        self._hold_s = hold_s
        self._passed: dict[str, _Passed] = {}  # pod uid ->
        self._wake = asyncio.Event()
        self.holding = 0  # filters waiting now
        self.waits = 0  # filters that waited, all told

    def passed(self, uid: str, units: PodUnits, nodes: Iterable[str]) -> None:
        if uid:
            self._passed[uid] = _Passed(self._clock(), units, frozenset(nodes))

    def bound(self, uid: str) -> bool:
        """The pod shows bound (or gone): True when the extender had passed it."""
        if self._passed.pop(uid, None) is None:
            return False
        self._wake.set()
        return True

    async def settle(self, uid: str, nodes: Iterable[str], units: PodUnits) -> None:
        """Until no pod in flight could change how `nodes` judge this pod (or `hold_s`)."""
        self._passed.pop(uid, None)  # a pod asked again was not bound
        names = tuple(nodes)
        while self._passed:
            now = self._clock()
            for key in [k for k, p in self._passed.items() if now - p.at >= self._hold_s]:
                del self._passed[key]  # not bound: kube-scheduler gave up on it
            if not self._passed or not self._matters(names, units):
                return
            left = min(p.at for p in self._passed.values()) + self._hold_s - now
            self._wake.clear()
            self.waits += 1
            self.holding += 1
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=left)
            finally:
                self.holding -= 1

    def _matters(self, names: tuple[str, ...], units: PodUnits) -> bool:
        """Would some node that fits the pod now refuse it with the pods in flight taken off
        it? Every pod in flight that passed some of these nodes is taken as landing on each
        (the wait is then longer than needed at worst, never shorter), so each alike class
        of nodes is judged once and a node costs one look-up."""
        landing = tuple(p for p in self._passed.values() if not p.nodes.isdisjoint(names))
        if not landing:
            return False
        table, overlay = self._table(), self._overlay
        classes = {(id(z.zones), z.policy, z.scope): z for z in map(table.get, names) if z}
        if overlay:
            asked = set(names)
            classes.update(((id(z.zones), z.policy, z.scope), z)
                           for name, z in overlay.items() if name in asked)  # fmt: skip
        return any(_flips(zones, units, landing) for zones in classes.values())


def _flips(zones: NodeZones, units: PodUnits, landing: tuple[_Passed, ...]) -> bool:
    if not free_fit(zones, units).fits:
        return False  # turned away already; more taken cannot let it through
    after = zones
    for other in landing:
        verdict = free_fit(after, other.units)
        if verdict.fits:
            after = less_taken(after, [verdict.taken])
    return not free_fit(after, units).fits
