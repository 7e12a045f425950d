"""What the extender let through, counted until the NodeResourceTopology shows it.

kube-scheduler counts the pods it has just bound at node level; the NUMA zones come from the
NodeResourceTopology, which the agent rewrites after the kubelet has admitted a pod (0.3 s
median, at most once a second). Without this ledger every pod of a burst sees the same free
NUMA nodes, and the kubelet refuses the ones that do not fit (issue 45).

- **Bound pods** come from a watch of pods placed on a node (`BoundPods`, pods.py), whatever
  scheduler bound them. A bound pod the kubelet has not admitted yet gets a prediction: what
  it will hold per NUMA node, from the one placement model on the node's zones less the
  pods already predicted there (the kubelet's own pick: webhook/placement_model/merge.py). Its
  share is off the zones the extender judges (`zones_of`) until the object shows it.
- **The object catches up** when it changes after the kubelet posted the pod's first status
  (admission comes first), or when its change covers the prediction: the observed counts
  replace the prediction, which is then judged (`right`, `other_numa_nodes`) when no pod
  ended on the node meanwhile. A pod that ends, is deleted or refused frees its predicted
  share at once (a refusal of a pod the extender let through counts as `refused`). Each
  wrong prediction is counted once and logged once.
- **In flight** (inflight.py): between the extender passing a pod and its bind showing in
  the watch, the next pod's filter waits (at most `hold_s`) when that pod's share could
  change its verdict. Per replica: kube-scheduler calls over one kept-alive connection.
- **Settled**: a pod admitted `SETTLE_S` ago on a node whose object changed since the
  prediction is shown by now (the agent read the kubelet after it), whatever the counts
  said: its share is dropped (`expire`, before each filter).
- **Stale object**: a pod admitted `stale_s` ago with no change of the object since its
  prediction (the agent down) keeps its predicted share, and the node is named stale in
  the extender's reasons and the log.
- **Catching up** (`catching_up`, for catchup.py): since when the node's view is due to
  change with no event kube-scheduler sees (a pod holding aligned resources ended there, or
  one it admitted is still counted) and the object has not changed since.

Bounded: one entry per bound pod not yet shown, dropped when shown, ended, or its node's
object goes; never below zero (less_taken clamps). Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from webhook.nodefit.free_check import STALE_S
from webhook.placement_model.free_now import Taken, free_fit, less_taken
from webhook.placement_model.kubelet_admission import pod_units
from webhook.placement_model.zones import NodeZones, Zone, shared
from webhook.scheduler.inflight import HOLD_S, InFlight
from webhook.scheduler.observed import Published, admitted, covers, same_counts
from webhook.scheduler.observed import delta as zone_delta

__all__ = ["OUTCOMES", "SETTLE_S", "STALE_S", "Ledger", "admitted"]

logger = logging.getLogger(__name__)

SETTLE_S: Final = 10.0  # the agent reads at +0, 1, 3 and 7 s after a pod event, writes 1/s
OUTCOMES: Final = ("right", "other_numa_nodes", "refused")
ZonesOf = Callable[[str], NodeZones | None]


@dataclass(slots=True)
class _Pending:
    name: str  # namespace/name, for the log
    node: str
    taken: Taken
    ours: bool  # the extender passed it (a refusal is then our wrong prediction)
    seen: int  # the node's object changes counted when it was predicted
    admitted_at: float | None = None  # the kubelet's first status seen: it holds its share


class Ledger:
    def __init__(
        self,
        cache: Published,
        *,
        clock: Callable[[], float] = time.monotonic,
        hold_s: float = HOLD_S,
        stale_s: float = STALE_S,
        on_outcome: Callable[[str], None] = lambda _outcome: None,
    ) -> None:
        self.raw = self._raw = cache.get  # the NodeResourceTopology cache's zones, as published
        self._cache = cache
        self._clock = clock
        self._hold_s = hold_s
        self._stale_s = stale_s
        self._on_outcome = on_outcome
        self.ready = False  # the first list of bound pods is in: until then, nothing is held
        self._pending: dict[str, _Pending] = {}  # pod uid -> its predicted share
        self._by_node: dict[str, dict[str, _Pending]] = {}  # in bind order
        # node -> its zones less its pending shares, only for nodes with some: the extender
        # looks a node up here first (a dict look-up, no call per node of the fleet)
        self.overlay: dict[str, NodeZones] = {}
        self.inflight = InFlight(lambda: cache.zones, self.overlay, clock=clock, hold_s=hold_s)
        self._alike: dict[Hashable, tuple[Zone, ...]] = {}  # counts -> the one shared tuple
        self._freed: set[str] = set()  # nodes where a pod ended since their object last changed
        self._stale_said: set[str] = set()
        self._changes: dict[str, int] = {}  # node -> changes of its object seen (the agent lives)
        # node -> when a pod holding aligned resources first ended there since its object
        # last changed: the object is due to show it freed
        self._released: dict[str, float] = {}
        self._changed = asyncio.Event()  # set (and replaced) at each change of an object
        self.retries = 0  # filters answered with an error so kube-scheduler retries (catchup.py)
        self.catching = 0  # filters waiting for an object to catch up now (catchup.py)

    @property
    def clock(self) -> Callable[[], float]:
        return self._clock

    @property
    def changed(self) -> asyncio.Event:
        """Set at the next change of some node's object."""
        return self._changed

    # --- what the extender reads ---------------------------------------------------------
    def table(self) -> Mapping[str, NodeZones]:
        """The cache's current node -> zones table (a relist swaps it whole): its own `get`
        is one C call per node, where `raw` is a method of ours."""
        return self._cache.zones

    def classes(self) -> Mapping[str, Hashable]:
        """The cache's current node -> class key, kept with `table()`."""
        return self._cache.classes

    def zones_of(self, node: str) -> NodeZones | None:
        """The node's zones less the shares of its pods the object does not show yet."""
        less = self.overlay.get(node)
        return less if less is not None else self._raw(node)

    def _refresh(self, node: str) -> None:
        """Keep `overlay` current for `node` (its pods or its object changed). Alike results
        share one zones tuple, so the extender still judges each class once."""
        pending, raw = self._by_node.get(node), self._raw(node)
        if not pending or raw is None:
            self.overlay.pop(node, None)
            return
        if len(self._alike) > 2 * len(self.overlay) + 64:
            self._alike = {}  # counts no node has any more
        less = less_taken(raw, [p.taken for p in pending.values()])
        self.overlay[node] = shared(less, self._alike)

    def catching_up(self, node: str) -> float | None:
        """Since when the node's view is due to change without a pod event (kube-scheduler
        sees none then): a pod ended there, or one admitted is still counted; or None."""
        released = self._released.get(node)
        pending = self._by_node.get(node)
        if pending:
            admitted_at = [p.admitted_at for p in pending.values() if p.admitted_at is not None]
            if admitted_at:
                return min(admitted_at) if released is None else min(released, *admitted_at)
        return released

    def pending(self, node: str) -> int:
        """Pods on `node` whose share the object does not show yet."""
        return len(self._by_node.get(node) or ())

    def pending_pods(self) -> list[str]:
        return [p.name for p in self._pending.values()]

    def expire(self) -> None:
        """Drop the shares of pods admitted `SETTLE_S` ago on nodes whose object changed since
        they were predicted: the agent lives and has read the kubelet since, so the object
        shows them (its change may have come before their status, or mixed with others')."""
        now = self._clock()
        for uid, p in list(self._pending.items()):
            late = p.admitted_at is not None and now - p.admitted_at > SETTLE_S
            if late and self._changes.get(p.node, 0) > p.seen:
                self._drop(uid, freed=False)

    def stale(self, node: str) -> str | None:
        """Why the node's object is out of date, or None (logged once per node when the
        extender first names it)."""
        pending = self._by_node.get(node)
        if not pending:  # the common case, once per node turned away: no clock read
            self._stale_said.discard(node)
            return None
        now = self._clock()
        changes = self._changes.get(node, 0)
        late = [now - p.admitted_at for p in pending.values()
                if p.admitted_at is not None and now - p.admitted_at > self._stale_s
                and changes <= p.seen]  # fmt: skip
        if not late:
            self._stale_said.discard(node)
            return None
        why = (f"NodeResourceTopology not updated {max(late):.0f}s after the kubelet admitted "
               f"{len(late)} pod(s) (agent down?); their share is counted")  # fmt: skip
        if node not in self._stale_said:
            self._stale_said.add(node)
            logger.warning("stale NodeResourceTopology", extra={"node": node, "reason": why})
        return why

    def stale_count(self) -> int:
        """Pods whose share only a stale object keeps counted: it moves when a node turns
        stale or fresh (the admission warnings' cached answers key on it)."""
        if not self._pending:
            return 0
        now = self._clock()
        return sum(1 for p in self._pending.values()
                   if p.admitted_at is not None and now - p.admitted_at > self._stale_s
                   and self._changes.get(p.node, 0) <= p.seen)  # fmt: skip

    # --- bound pods (pods.py) ------------------------------------------------------------
    def pods_listed(self, pods: Iterable[Mapping[str, Any]]) -> None:
        seen = set()
        for pod in pods:
            seen.add(str((pod.get("metadata") or {}).get("uid") or ""))
            self.pod_event("ADDED", pod)
        for uid in [u for u in self._pending if u not in seen]:
            self._drop(uid, freed=True)
        self.ready = True

    def pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        uid, node = str(meta.get("uid") or ""), str(spec.get("nodeName") or "")
        if not uid:
            return
        phase = (pod.get("status") or {}).get("phase")
        if kind == "DELETED" or phase in ("Succeeded", "Failed"):
            self._ended(uid, node, pod, refused=kind != "DELETED" and phase == "Failed")
            return
        if not node:
            return
        ours = self.inflight.bound(uid)
        known = self._pending.get(uid)
        if admitted(pod):
            if known is not None and known.admitted_at is None:
                known.admitted_at = self._clock()
            return
        if known is None:
            self._predict(uid, node, pod, ours=ours)

    def _predict(self, uid: str, node: str, pod: Mapping[str, Any], *, ours: bool) -> None:
        zones = self.zones_of(node)
        if zones is None:
            return
        verdict = free_fit(zones, pod_units(pod.get("spec") or {}))
        if not verdict.fits or not verdict.taken:
            return  # nothing it will hold (or its kubelet refuses it): nothing to count
        meta = pod.get("metadata") or {}
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        entry = _Pending(name, node, verdict.taken, ours, self._changes.get(node, 0))
        self._pending[uid] = entry
        self._by_node.setdefault(node, {})[uid] = entry
        self._refresh(node)

    def _ended(self, uid: str, node: str, pod: Mapping[str, Any], *, refused: bool) -> None:
        self.inflight.bound(uid)
        entry = self._pending.get(uid)
        if entry is None:
            if node:
                self._freed.add(node)  # what it held frees later: no delta can be judged
                units = pod_units(pod.get("spec") or {})
                if (units.pod or units.container) and self._raw(node) is not None:
                    self._released.setdefault(node, self._clock())
            return
        if entry.admitted_at is not None:
            self._released.setdefault(entry.node, self._clock())
        if refused and entry.admitted_at is None and entry.ours:
            reason = (pod.get("status") or {}).get("reason") or "refused"
            self._outcome("refused", entry, f"its kubelet refused it ({reason})")
        self._drop(uid, freed=entry.admitted_at is not None)

    def _drop(self, uid: str, *, freed: bool) -> None:
        entry = self._pending.pop(uid)
        on_node = self._by_node.get(entry.node, {})
        on_node.pop(uid, None)
        if not on_node:
            self._by_node.pop(entry.node, None)
        self._refresh(entry.node)
        if freed:
            self._freed.add(entry.node)

    # --- the node's object (nrt_cache.py) ------------------------------------------------
    def nrt_changed(self, node: str, before: NodeZones | None, after: NodeZones | None) -> None:
        """The node's NodeResourceTopology was listed, changed or deleted."""
        self._observe(node, before, after)
        self._refresh(node)
        if after is None or before is None or not same_counts(before, after):
            self._released.pop(node, None)
            self._changed.set()
            self._changed = asyncio.Event()

    def _observe(self, node: str, before: NodeZones | None, after: NodeZones | None) -> None:
        pending = self._by_node.get(node)
        if after is None:
            for uid in list(pending or ()):
                self._drop(uid, freed=False)
            self._freed.discard(node)
            return
        if before is not None and same_counts(before, after):
            return  # nothing observed (metadata only): no new read of the kubelet
        self._changes[node] = self._changes.get(node, 0) + 1
        judged = (
            before is not None and node not in self._freed and len(before.zones) == len(after.zones)
        )
        delta = zone_delta(before, after) if judged and before is not None else {}
        for uid, entry in list((pending or {}).items()):
            # Shown: admitted before this change, or (its status not seen yet) the change
            # holds its share. Pods are admitted in bind order, as they are walked here.
            whole = bool(delta) and covers(delta, entry.taken, per_zone=True)
            if entry.admitted_at is None and not whole:
                continue
            if judged and whole:
                self._outcome("right", entry, "")
            elif judged and covers(delta, entry.taken, per_zone=False):
                self._outcome("other_numa_nodes", entry, "the kubelet used other NUMA nodes")
            if whole:
                for name, counts in entry.taken:
                    delta[name] = [s - c for s, c in zip(delta[name], counts, strict=False)]
            self._drop(uid, freed=False)
        self._freed.discard(node)

    def _outcome(self, outcome: str, entry: _Pending, why: str) -> None:
        self._on_outcome(outcome)
        if outcome != "right":
            logger.warning(
                "NUMA placement predicted wrong",
                extra={"pod": entry.name, "node": entry.node, "outcome": outcome,
                       "predicted": dict(entry.taken), "reason": why},
            )  # fmt: skip
