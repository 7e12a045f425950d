"""The network position end to end in the sync loop: local metadata server over real HTTP,
fake API server, real client; labels other tools wrote win and are never touched."""

from __future__ import annotations

import dataclasses
import json

from agent.discovery.discover import DiscoveryOptions
from agent.position.metadata import PROVIDERS, MetadataSource
from agent.sync.labels.node_diff import owned_part
from common.vocabulary import ForeignLabel, Label
from tests.agent.position.metadata_server import metadata_server
from tests.agent.sync.conftest import NODE
from tests.agent.sync.fake_apiserver import FakeApiServer
from tests.agent.sync.harness import running_agent, wait_until

TOPOLOGY = {"cluster": "c1", "block": "b7", "subblock": "s2", "host": "h"}


async def _synced_labels(
    apiserver: FakeApiServer, options: DiscoveryOptions, labels: dict[str, str], body: str
) -> dict[str, str]:
    with metadata_server() as server:
        url = server.answer("/attrs", body)
        source = MetadataSource(PROVIDERS["gcp"], endpoint=url, interval=3600)
        apiserver.add_node(NODE, labels=labels)
        opts = dataclasses.replace(options, network_metadata=source)
        async with running_agent(apiserver, node=NODE, options=opts, watch=False) as agent:
            await wait_until(lambda: agent.synced_count() >= 1)
            agent.loop.poke("again")  # a second pass: no second metadata request
            await wait_until(lambda: agent.synced_count() >= 2)
        assert len(server.requests) == 1
    return apiserver.labels(NODE)


async def test_metadata_position_is_published(
    apiserver: FakeApiServer, options: DiscoveryOptions
) -> None:
    body = json.dumps({"physical_host_topology": json.dumps(TOPOLOGY)})
    labels = await _synced_labels(apiserver, options, {}, body)
    assert labels[Label.NETWORK_TIER_1] == "c1.b7.s2"
    assert labels[Label.NETWORK_TIER_3] == "c1"


async def test_existing_labels_win_and_stay_as_they_are(
    apiserver: FakeApiServer, options: DiscoveryOptions
) -> None:
    gke = {ForeignLabel.GKE_BLOCK: "b7", ForeignLabel.GKE_SUBBLOCK: "s9"}
    body = json.dumps({"physical_host_topology": TOPOLOGY})
    labels = await _synced_labels(apiserver, options, gke, body)
    assert labels[Label.NETWORK_TIER_1] == "b7.s9"
    assert Label.NETWORK_TIER_3 not in labels
    assert {k: labels[k] for k in gke} == gke


async def test_malformed_metadata_keeps_every_other_label(
    apiserver: FakeApiServer, options: DiscoveryOptions
) -> None:
    labels = await _synced_labels(apiserver, options, {}, "{oops")
    owned = owned_part(labels)
    assert Label.CPU_SOCKETS in owned
    assert not [k for k in owned if "network-tier" in k]
