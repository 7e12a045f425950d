"""A filter that turns a pod away while a node's NodeResourceTopology lags a change
kube-scheduler has already seen (a pod ended there, or one the kubelet admitted is still
counted by the ledger).

kube-scheduler v1.37 files a pod the extender turned away under the pseudo-plugin `Extender`
(`framework.ExtenderName`, pkg/scheduler/schedule_one.go) and moves it out of its
unschedulable pool on any cluster event it watches (pods, nodes, volumes, ...), never on a
NodeResourceTopology change: it does not watch them. The pod deleted on a node requeues the
waiting pod at once, so its filter comes before the agent's rewrite (0.3 to 1.3 s later); it
is turned away again, and nothing moves it afterwards but an unrelated event or the
5-minute flush. So a filter that passes no node while one of its nodes is catching up:

- waits for the object (at most `WAIT_S` after that node's change, so one change costs
  kube-scheduler's serial loop that long at most, however many pods wait), then judges again;
- if the object is still behind, answers an `Error`: kube-scheduler retries a pod whose
  attempt failed with an error after its backoff (1 s doubling to 10 s), whatever the events
  (`determineSchedulingHintForInFlightPod`: no rejector plugin, `queueAfterBackoff`). Only
  for `RETRY_S` after the change: an object that never catches up (the agent down) leaves the
  pod waiting as usual, the node named stale in its reasons.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Final

from webhook.scheduler.accounting import STALE_S, Ledger

__all__ = ["RETRY_S", "WAIT_S", "catch_up"]

WAIT_S: Final = 2.0  # the agent reads at +0 and +1 s after a pod event, writes 1/s at most
RETRY_S: Final = STALE_S


async def catch_up(
    ledger: Ledger,
    judge: Callable[[], dict[str, Any]],
    result: dict[str, Any],
    *,
    wait_s: float = WAIT_S,
    retry_s: float = RETRY_S,
) -> dict[str, Any]:
    """`result` (an ExtenderFilterResult), or `judge()`'s once the lagging objects changed, or
    an error asking kube-scheduler to retry. Costs nothing when some node passed."""
    if result["NodeNames"] or not ledger.ready:
        return result
    start = ledger.clock()
    behind = _behind(ledger, result, start, retry_s)
    while behind:
        now = ledger.clock()
        until = min(start + wait_s, max(behind.values()) + wait_s)
        if until <= now:
            ledger.retries += 1
            return {**result, "Error": _retry_reason(behind, now)}
        ledger.catching += 1
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ledger.changed.wait(), timeout=until - now)
        finally:
            ledger.catching -= 1
        if all(ledger.catching_up(node) == since for node, since in behind.items()):
            continue  # another node's object changed: nothing to judge again
        result = judge()
        if result["NodeNames"]:
            return result
        behind = _behind(ledger, result, ledger.clock(), retry_s)
    return result


def _behind(ledger: Ledger, result: dict[str, Any], now: float, retry_s: float) -> dict[str, float]:
    """The turned-away nodes whose object is due to change, and since when."""
    return {
        node: since
        for node in result.get("FailedNodes") or ()
        if (since := ledger.catching_up(node)) is not None and now - since < retry_s
    }


def _retry_reason(behind: dict[str, float], now: float) -> str:
    node, since = max(behind.items(), key=lambda item: item[1])
    more = f" (and {len(behind) - 1} more node(s))" if len(behind) > 1 else ""
    return (
        f"NodeResourceTopology of {node}{more} not updated {now - since:.0f}s after a pod "
        "started or ended there; kube-scheduler retries the pod after its backoff"
    )
