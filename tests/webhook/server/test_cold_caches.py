"""Before its caches are full the webhook warns nothing that the caches would decide, and
keeps admitting (fail-open unchanged): the chosen readiness contract (issue 34). It is Ready
at once, so a restart at fleet size never holds admission back; a throttled API server (429)
during the first list is said in a log line, and the warnings come once the lists are in."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from tests.agent.sync.fake_apiserver import Fault
from tests.webhook.placement_model.nrt import nrt
from tests.webhook.server.conftest import TlsFiles, admission_review, gpu_pod, post_review
from tests.webhook.server.conftest import wait_until as wait_for
from tests.webhook.server.fake_topology import TopologyApiServer
from tests.webhook.server.test_numa_scheduling import NUMA_POLICY, numa_server, single_numa_dgx

THROTTLED = Fault(429, retry_after="1")
NO_ROOM = "has room on one NUMA node now"


@pytest.fixture
async def throttled(tmp_path: Path) -> AsyncIterator[TopologyApiServer]:
    """Two single-numa-node DGX H100s, both fragmented (2 + 2 free GPUs), whose Node and
    NodeResourceTopology lists answer 429 until the test lets them through."""
    async with TopologyApiServer(tmp_path) as server:
        for name in ("dgx-h100-a", "dgx-h100-b"):
            server.node_store.put(single_numa_dgx(name))
            server.nrt_store.put(nrt(name, [2, 2]))
        server.outage = THROTTLED
        server.nrt_outage = THROTTLED
        yield server


async def _warnings(client: aiohttp.ClientSession, url: str) -> list[str]:
    status, body = await post_review(client, url, admission_review(gpu_pod(gpus=4, policy="numa")))
    response = body["response"]
    assert status == 200 and response["allowed"] is True and "patch" in response
    return list(response.get("warnings") or [])


async def test_throttled_first_lists_warn_nothing_then_the_warnings_come(
    throttled: TopologyApiServer,
    tmp_path: Path,
    tls_files: TlsFiles,
    client: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    policies = tmp_path / "numa-policies"
    policies.mkdir()
    (policies / "numa.yaml").write_text(NUMA_POLICY)
    caplog.set_level(logging.WARNING)
    async with numa_server(throttled, policies, tls_files) as (server, _):
        assert server.state is not None and server.state.nodes is not None
        nodes = server.state.nodes

        async def both_refused() -> bool:
            return throttled.node_requests.count("list") >= 1 and len(throttled.nrt_requests) >= 1

        await wait_for(both_refused, "both first lists refused with 429")
        assert not nodes.ready
        cold = await _warnings(client, server.url)
        assert not [w for w in cold if NO_ROOM in w or "no node fits" in w]
        said = [r.getMessage() for r in caplog.records if "not full yet" in r.getMessage()]
        assert "node cache: first list failed, the cache is not full yet; retrying" in said
        assert (
            "NodeResourceTopology cache: first list failed, the cache is not full yet; retrying"
            in said
        )

        # Half full (nodes listed, NodeResourceTopology still throttled): still silent.
        throttled.outage = None
        await wait_for(_true(lambda: nodes.ready), "the node list")
        half = await _warnings(client, server.url)
        assert not [w for w in half if NO_ROOM in w]
        assert "watch" not in throttled.nrt_requests  # its list was refused all along

        throttled.nrt_outage = None
        warm: list[str] = []

        async def warned() -> bool:
            warm[:] = await _warnings(client, server.url)
            return any(NO_ROOM in w for w in warm)

        await wait_for(warned, "the NUMA warning once both caches are full")
    (warning,) = [w for w in warm if NO_ROOM in w]
    assert warning.startswith("topoplace: placement policy numa: none of the 2 matching nodes")


def _true(check: Callable[[], object]) -> Callable[[], Awaitable[bool]]:
    async def poll() -> bool:
        return bool(check())

    return poll
