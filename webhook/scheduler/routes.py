"""The extender's HTTPS routes on the webhook's listener: `POST /scheduler/filter` and
`POST /scheduler/prioritize` (kube-scheduler's urlPrefix `https://<service>/scheduler`).

A body that is not an ExtenderArgs is answered HTTP 400 with the reason (kube-scheduler
then reports the extender's error on the pod); never a 500.
"""

from __future__ import annotations

from aiohttp import web

from webhook import jsonio
from webhook.scheduler.extender import (
    MAX_SCORE,
    ExtenderArgs,
    ZonesOf,
    filter_nodes,
    parse_args,
    prioritize,
)
from webhook.scheduler.locality import WeightOf, lower_scores

__all__ = ["FILTER_PATH", "PRIORITIZE_PATH", "REMOTE_WEIGHT", "ZONES", "add_routes"]

FILTER_PATH = "/scheduler/filter"
PRIORITIZE_PATH = "/scheduler/prioritize"
# Typed by annotation: AppKey's second argument takes a class, and these are Callable aliases.
ZONES: web.AppKey[ZonesOf] = web.AppKey("topoplace_zones")
REMOTE_WEIGHT: web.AppKey[WeightOf] = web.AppKey("topoplace_remote_weight")


async def _args(request: web.Request) -> ExtenderArgs:
    try:
        return parse_args(jsonio.loads(await request.read()))
    except ValueError as exc:  # BadArgs, and JSON that does not parse
        raise web.HTTPBadRequest(text=f"malformed ExtenderArgs: {exc}\n") from None


async def _filter(request: web.Request) -> web.Response:
    args = await _args(request)
    result = filter_nodes(args, request.app[ZONES])
    return web.Response(body=jsonio.dumps(result), content_type="application/json")


async def _prioritize(request: web.Request) -> web.Response:
    args = await _args(request)
    zones_of = request.app[ZONES]
    result = prioritize(args, zones_of)
    # Opt-in per policy (placement.remoteAccessWeight): measured remote access lowers a score.
    result = lower_scores(result, args.pod, zones_of, request.app[REMOTE_WEIGHT], MAX_SCORE)
    return web.Response(body=jsonio.dumps(result), content_type="application/json")


def _no_weight(_pod: object) -> int:
    return 0


def add_routes(app: web.Application, zones_of: ZonesOf, weight_of: WeightOf = _no_weight) -> None:
    app[ZONES] = zones_of
    app[REMOTE_WEIGHT] = weight_of
    app.router.add_post(FILTER_PATH, _filter)
    app.router.add_post(PRIORITIZE_PATH, _prioritize)
