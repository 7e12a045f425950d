"""Placement that learns (opt-in, `placement.remoteAccessWeight`): over real HTTPS, of two
otherwise equal nodes the one whose NodeResourceTopology zones publish high recent remote
access loses the extender's score; a policy without the weight scores them alike; explain
shows the figure per node."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from common.node_resource_topology import REMOTE_ACCESS_ATTRIBUTE
from tests.webhook.placement_model.nrt import nrt
from tests.webhook.server.conftest import TlsFiles, wait_until
from tests.webhook.server.fake_topology import TopologyApiServer
from tests.webhook.server.test_numa_scheduling import (
    NUMA_POLICY,
    call,
    extender_args,
    numa_server,
    scheduled_pod,
    single_numa_dgx,
)
from webhook.nodefit.free_check import remote_note, remote_penalty
from webhook.placement_model.zones import zones_from_object

LEARNING_POLICY = NUMA_POLICY.replace("name: numa", "name: learning").replace(
    "numaAwareScheduler: topoplace-numa-scheduler",
    "numaAwareScheduler: topoplace-numa-scheduler\n    remoteAccessWeight: 50",
)


def with_remote(obj: dict[str, Any], percents: list[str | None]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    for zone, value in zip(obj["zones"], percents, strict=True):
        if value is not None:
            zone["attributes"] = [{"name": REMOTE_ACCESS_ATTRIBUTE, "value": value}]
    return obj


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[TopologyApiServer]:
    async with TopologyApiServer(tmp_path) as server:
        for name in ("dgx-h100-a", "dgx-h100-b"):
            server.node_store.put(single_numa_dgx(name))
        # Equal free GPUs; dgx-h100-a's zone 1 saw 60% of its new pages go to remote CPUs.
        server.nrt_store.put(with_remote(nrt("dgx-h100-a", [4, 4]), ["5", "60"]))
        server.nrt_store.put(with_remote(nrt("dgx-h100-b", [4, 4]), ["5", "0"]))
        yield server


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "numa.yaml").write_text(NUMA_POLICY)
    (directory / "learning.yaml").write_text(LEARNING_POLICY)
    return directory


def learning_pod(gpus: int) -> dict[str, Any]:
    pod = scheduled_pod(gpus)
    pod["metadata"]["labels"]["topoplace.io/policy"] = "learning"
    return pod


async def test_the_node_with_high_remote_access_loses_the_score_only_when_opted_in(
    api: TopologyApiServer, policies: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    async with numa_server(api, policies, tls_files) as (_, base):
        plain = extender_args(scheduled_pod(4), "dgx-h100-a", "dgx-h100-b")

        async def listed() -> bool:
            status, body = await call(client, f"{base}/scheduler/filter", plain)
            return status == 200 and body["NodeNames"] == ["dgx-h100-a", "dgx-h100-b"]

        await wait_until(listed, "the NodeResourceTopology list")
        _, scores = await call(client, f"{base}/scheduler/prioritize", plain)
        assert scores[0]["Score"] == scores[1]["Score"]  # no weight: alike
        tight = scores[0]["Score"]
        learning = extender_args(learning_pod(4), "dgx-h100-a", "dgx-h100-b")
        status, scores = await call(client, f"{base}/scheduler/prioritize", learning)
        assert status == 200
        # 10 × 50/100 × 60/100 = 3 points off dgx-h100-a; dgx-h100-b's busiest zone is 5%.
        assert scores == [
            {"Host": "dgx-h100-a", "Score": max(0, tight - 3)},
            {"Host": "dgx-h100-b", "Score": tight},
        ]


def test_the_figure_is_the_busiest_zone_and_a_bad_value_is_no_figure() -> None:
    assert zones_from_object(with_remote(nrt("n", [4, 4]), ["5", "60"])).remote_access_percent == 60
    assert zones_from_object(nrt("n", [4, 4])).remote_access_percent is None
    odd = zones_from_object(with_remote(nrt("n", [4, 4]), ["-1", "150"]))
    assert odd.remote_access_percent is None and len(odd.zones) == 2  # zones kept
    zones = zones_from_object(with_remote(nrt("n", [4, 4]), [None, "40"]))
    assert remote_penalty(zones, 100) == 4 and remote_penalty(zones, 0) == 0
    assert remote_penalty(None, 100) == 0  # nothing known: reactive, no penalty
    assert remote_note(zones, 25) == (
        "recent remote memory access 40% (measured, busiest zone); remoteAccessWeight 25: "
        "extender score -1"
    )


def test_explain_shows_the_figure_per_node(tmp_path: Path) -> None:
    from webhook.nodefit.explanation import explain_pod
    from webhook.placement_model.filters.nodes import NodeView
    from webhook.policy.loader import load_policy_dir

    (tmp_path / "learning.yaml").write_text(LEARNING_POLICY)
    policies = load_policy_dir(tmp_path)
    nodes = [NodeView.from_object(single_numa_dgx(n)) for n in ("dgx-h100-a", "dgx-h100-b")]
    objects = {
        "dgx-h100-a": zones_from_object(with_remote(nrt("dgx-h100-a", [4, 4]), ["5", "60"])),
        "dgx-h100-b": zones_from_object(nrt("dgx-h100-b", [4, 4])),
    }
    pod = learning_pod(4)
    explained = explain_pod(pod, "default", policies, nodes, zones=objects.get)
    notes = {v.node: v.notes for v in explained.nodes}
    assert any("remote memory access 60%" in n and "score -3" in n for n in notes["dgx-h100-a"])
    assert not any("remote memory access" in n for n in notes["dgx-h100-b"])
