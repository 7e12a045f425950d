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


async def test_the_gates_are_found_at_the_end_of_megabytes_of_metrics(served: Any) -> None:
    """A real v1.37.2 API server's /metrics is 2.2 MB with the gate lines near the end (name
    order): the whole body is read, not the first chunk that arrived."""
    server, api = served
    filler = "".join(
        f'apiserver_request_total{{code="200",resource="r{i}",verb="GET"}} {i}\n'
        for i in range(40_000)
    )
    server.metrics = (200, filler + _METRICS)
    seen = await look_once(api)
    assert seen.gates == {
        "GenericWorkload": True,
        "TopologyAwareWorkloadScheduling": True,
        "WorkloadWithJob": False,
    }


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
