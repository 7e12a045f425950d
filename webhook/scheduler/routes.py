"""The extender's HTTPS routes on the webhook's listener: `POST /scheduler/filter` and
`POST /scheduler/prioritize` (kube-scheduler's urlPrefix `https://<service>/scheduler`).

Both judge the nodes on the ledger's zones (accounting.py): the published counts less the
pods bound but not shown yet. A filter first waits (briefly, bounded: inflight.py) while a pod
the extender passed before, not shown bound yet, could change its verdict, then marks its own
pod in flight when it passes it.

A body that is not an ExtenderArgs is answered HTTP 400 with the reason (kube-scheduler
then reports the extender's error on the pod); never a 500.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from webhook import jsonio
from webhook.placement_model.kubelet_admission import pod_units
from webhook.scheduler.accounting import Ledger
from webhook.scheduler.catchup import catch_up
from webhook.scheduler.extender import (
    MAX_SCORE,
    ExtenderArgs,
    filter_nodes,
    parse_args,
    prioritize,
)
from webhook.scheduler.locality import WeightOf, lower_scores

__all__ = ["FILTER_PATH", "LEDGER", "PRIORITIZE_PATH", "REMOTE_WEIGHT", "add_routes"]

FILTER_PATH = "/scheduler/filter"
PRIORITIZE_PATH = "/scheduler/prioritize"
# Typed by annotation: AppKey's second argument takes a class, and these are Callable aliases.
LEDGER = web.AppKey("topoplace_ledger", Ledger)
REMOTE_WEIGHT: web.AppKey[WeightOf] = web.AppKey("topoplace_remote_weight")


async def _args(request: web.Request) -> ExtenderArgs:
    try:
        return parse_args(jsonio.loads(await request.read()))
    except ValueError as exc:  # BadArgs, and JSON that does not parse
        raise web.HTTPBadRequest(text=f"malformed ExtenderArgs: {exc}\n") from None


def _filtered(args: ExtenderArgs, ledger: Ledger) -> dict[str, Any]:
    return filter_nodes(args, ledger.table().get, ledger.stale, ledger.overlay, ledger.classes())


async def _filter(request: web.Request) -> web.Response:
    args = await _args(request)
    ledger = request.app[LEDGER]
    units = pod_units(args.pod["spec"])
    ledger.expire()
    if ledger.ready:  # the bound pods' watch is in: binds will show
        await ledger.inflight.settle(args.uid, args.nodes, units)
    result = _filtered(args, ledger)
    result = await catch_up(ledger, lambda: _filtered(args, ledger), result)
    if result["NodeNames"] and ledger.ready:  # nodes without an object never make one wait
        ledger.inflight.passed(args.uid, units, result["NodeNames"])
    return web.Response(body=jsonio.dumps(result), content_type="application/json")


async def _prioritize(request: web.Request) -> web.Response:
    args = await _args(request)
    ledger = request.app[LEDGER]
    result = prioritize(args, ledger.table().get, ledger.overlay, ledger.classes())
    # Opt-in per policy (placement.remoteAccessWeight): measured remote access lowers a score.
    result = lower_scores(result, args.pod, ledger.raw, request.app[REMOTE_WEIGHT], MAX_SCORE)
    return web.Response(body=jsonio.dumps(result), content_type="application/json")


def _no_weight(_pod: object) -> int:
    return 0


def add_routes(app: web.Application, ledger: Ledger, weight_of: WeightOf = _no_weight) -> None:
    app[LEDGER] = ledger
    app[REMOTE_WEIGHT] = weight_of
    app.router.add_post(FILTER_PATH, _filter)
    app.router.add_post(PRIORITIZE_PATH, _prioritize)
