"""The Workload API discovery over real HTTP with the real kubernetes-asyncio client: what the
API server serves and which gates it has on, at start and when that changes; a refusal or a
404 is an answer, not a crash."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client

from tests.webhook.workloads.test_gangs import _METRICS, _RESOURCES
from webhook.scheduler.workload_api import WorkloadApi, look_once


class _ApiServer:
    """GET /apis/scheduling.k8s.io/v1beta1 and GET /metrics, as a v1.37 API server answers."""

    def __init__(self) -> None:
        self.resources: tuple[int, Any] = (200, _RESOURCES)
        self.metrics: tuple[int, str] = (200, _METRICS)
        self.seen: list[str] = []

    async def _group(self, request: web.Request) -> web.Response:
        self.seen.append(request.path)
        status, body = self.resources
        return web.json_response(body, status=status)

    async def _metrics(self, request: web.Request) -> web.Response:
        self.seen.append(request.path)
        status, text = self.metrics
        return web.Response(text=text, status=status)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/apis/scheduling.k8s.io/v1beta1", self._group)
        app.router.add_get("/metrics", self._metrics)
        return app


@pytest.fixture
async def served() -> AsyncIterator[tuple[_ApiServer, client.ApiClient]]:
    server = _ApiServer()
    runner = web.AppRunner(server.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    cfg = client.Configuration(host=f"http://127.0.0.1:{port}")
    async with client.ApiClient(cfg) as api:
        yield server, api
    await runner.cleanup()


async def test_a_cluster_with_the_api_and_two_gates(served: Any) -> None:
    server, api = served
    seen = await look_once(api)
    assert seen.resources is not None and "podgroups" in seen.resources
    assert seen.pod_groups and not seen.jobs  # WorkloadWithJob is 0 in _METRICS
    assert server.seen == ["/apis/scheduling.k8s.io/v1beta1", "/metrics"]


async def test_no_api_and_no_right_to_metrics_are_answers(served: Any) -> None:
    server, api = served
    server.resources = (404, {"kind": "Status", "code": 404})
    server.metrics = (403, 'forbidden: User "system:serviceaccount:x" cannot get path "/metrics"')
    seen = await look_once(api)
    assert seen.resources == frozenset() and seen.gates is None
    assert "does not serve" in seen.lacking(jobs=True)


async def test_the_loop_follows_a_change_and_counts_it(served: Any) -> None:
    server, api = served
    states: list[tuple[bool, int]] = []

    async def sleep(_seconds: float) -> None:
        states.append((watcher.current.jobs, watcher.generation))
        if len(states) == 1:  # the API server restarted with WorkloadWithJob on
            on = _METRICS.replace(
                '"WorkloadWithJob",stage="ALPHA"} 0', '"WorkloadWithJob",stage="ALPHA"} 1'
            )
            server.metrics = (200, on)
        elif len(states) == 3:
            raise asyncio.CancelledError

    watcher = WorkloadApi(interval=60, sleep=sleep)
    with pytest.raises(asyncio.CancelledError):
        await watcher.follow(api)
    assert states == [(False, 1), (True, 2), (True, 2)]  # unchanged: no new generation
