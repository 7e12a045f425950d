"""Cloud metadata over real HTTP from a local server: the answers each cloud gives, and the
bad ones (unreachable, slow, malformed, absurd), each leaving the position unknown."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest

from agent.position.derive import PositionFacts, position_labels
from agent.position.metadata import MAX_BODY, PROVIDERS, MetadataSource
from common.vocabulary import Label
from tests.agent.position.metadata_server import MetadataServer, metadata_server

GCP_PATH = "/computeMetadata/v1/instance/attributes/?recursive=true"
OCI_PATH = "/opc/v2/host/rdmaTopologyData"


@pytest.fixture
def server() -> MetadataServer:
    with metadata_server() as s:
        yield s


def _gcp(server: MetadataServer, body: object, **kw: Any) -> MetadataSource:
    text = body if isinstance(body, str) else json.dumps(body)
    return MetadataSource(PROVIDERS["gcp"], endpoint=server.answer(GCP_PATH, text), **kw)


def test_gcp_physical_host_topology_gives_three_tiers_with_googles_header(
    server: MetadataServer,
) -> None:
    topo = {"cluster": "c1", "block": "b7", "subblock": "s2", "host": "h9"}
    # The attribute's value is a string holding JSON, as the metadata server serves it.
    found = _gcp(server, {"physical_host_topology": json.dumps(topo), "x": "y"}).tiers()
    assert found is not None and found.ids == ("s2", "b7", "c1")
    ((_, headers),) = server.requests
    assert headers["Metadata-Flavor"] == "Google"


def test_gcp_older_physical_host_and_the_subBlock_spelling(server: MetadataServer) -> None:
    assert _gcp(server, {"physical_host": "/b7/s2/h9"}).tiers().ids == ("s2", "b7", None)
    spelled = {"physical_host_topology": {"block": "b", "subBlock": "s"}}
    assert _gcp(server, spelled).tiers().ids == ("s", "b", None)
    assert _gcp(server, {"other": "1"}).tiers().ids == (None, None, None)


def test_oci_rdma_topology(server: MetadataServer) -> None:
    body = {
        "customerHPCIslandId": "ocid1.hpcisland.oc1.iad.aaa",
        "customerNetworkBlock": "ocid1.networkblock.oc1.iad.bbb",
        "customerLocalBlock": "ocid1.localblock.oc1.iad.ccc",
        "customerHostId": "ocid1.host.oc1.iad.ddd",
    }
    source = MetadataSource(PROVIDERS["oci"], endpoint=server.answer(OCI_PATH, json.dumps(body)))
    found = source.tiers()
    assert found is not None and found.ids[0].endswith("ccc") and found.ids[2].endswith("aaa")
    assert server.requests[0][1]["Authorization"] == "Bearer Oracle"


def test_one_request_per_interval_whatever_the_answer(server: MetadataServer) -> None:
    now = [0.0]
    source = _gcp(server, {"physical_host": "/b/s/h"}, interval=60.0, clock=lambda: now[0])
    for _ in range(5):
        source.tiers()  # a resync and four dataset events within one interval
    assert len(server.requests) == 1
    now[0] = 61.0
    source.tiers()
    assert len(server.requests) == 2 == source.requests


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ("{not json", 200, "not JSON"),
        ('["a list"]', 200, "not a JSON object"),
        ('{"physical_host_topology": {"block": 7}}', 200, "not a string"),
        (json.dumps({"physical_host_topology": {"block": "b" * 5000}}), 200, "not a usable id"),
        ('{"physical_host": "no-slashes"}', 200, "physical_host is not"),
        ("x" * (MAX_BODY + 10), 200, "longer than"),
        ("gone", 500, "HTTP 500"),
    ],
)
def test_bad_answers_leave_the_position_unknown_and_say_why_once(
    server: MetadataServer, body: str, status: int, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    source = MetadataSource(
        PROVIDERS["gcp"], endpoint=server.answer(GCP_PATH, body, status), interval=0.0
    )
    with caplog.at_level(logging.WARNING, logger="agent.position.metadata"):
        assert source.tiers() is None
        assert source.tiers() is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and reason in lines[0], lines


def test_unreachable_server_is_unknown() -> None:
    # Port 1 on loopback: nothing listens there; the connection is refused at once.
    source = MetadataSource(PROVIDERS["gcp"], endpoint="http://127.0.0.1:1/x", interval=0.0)
    assert source.tiers() is None


def test_a_slow_server_is_given_up_on_after_the_timeout(server: MetadataServer) -> None:
    server.hold = threading.Event()
    source = _gcp(server, {"physical_host": "/b/s/h"}, timeout=0.2)
    try:
        assert source.tiers() is None
    finally:
        server.hold.set()


def test_the_request_never_goes_through_the_pods_proxy(
    server: MetadataServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Agents get HTTP(S)_PROXY for the API server; metadata servers are link-local.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:1")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:1")
    assert _gcp(server, {"physical_host": "/b/s/h"}).tiers() is not None


AZURE_PATH = "/metadata/instance/compute?api-version=2021-02-01"


def _azure_compute(**fields: object) -> dict[str, object]:
    """An IMDS `instance/compute` answer for a scale-set VM, the fields as IMDS spells them."""
    compute: dict[str, object] = {
        "azEnvironment": "AzurePublicCloud",
        "location": "eastus",
        "name": "gpu-pool_3",
        "osType": "Linux",
        "placementGroupId": "f67c14ab-e92c-408c-ae2d-da15866ec79a",
        "platformFaultDomain": "0",
        "platformUpdateDomain": "3",
        "vmId": "02aab8a4-74ef-476e-8182-f6d2ba4166a6",
        "vmScaleSetName": "gpu-pool",
        "vmSize": "Standard_ND96isr_H100_v5",
        "zone": "",
    }
    compute.update(fields)
    return {k: v for k, v in compute.items() if v is not None}


def _azure(server: MetadataServer, body: object, status: int = 200) -> MetadataSource:
    text = body if isinstance(body, str) else json.dumps(body)
    return MetadataSource(
        PROVIDERS["azure"], endpoint=server.answer(AZURE_PATH, text, status), interval=0.0
    )


def test_azure_placement_group_is_tier_3_only_asked_with_the_imds_header(
    server: MetadataServer,
) -> None:
    assert PROVIDERS["azure"].endpoint.endswith(AZURE_PATH)  # the real address, same path
    found = _azure(server, _azure_compute()).tiers()
    assert found is not None
    assert found.ids == (None, None, "f67c14ab-e92c-408c-ae2d-da15866ec79a")
    labels, _ = position_labels(PositionFacts(metadata=found), {})
    assert labels == {Label.NETWORK_TIER_3: "f67c14ab-e92c-408c-ae2d-da15866ec79a"}
    ((path, headers),) = server.requests
    assert path == AZURE_PATH and headers["Metadata"] == "true"


@pytest.mark.parametrize("placement", [None, ""])
def test_azure_vm_outside_a_scale_set_gets_no_tier(
    server: MetadataServer, placement: str | None
) -> None:
    # IMDS serves "" for a VM in no scale set; an older answer may lack the field.
    found = _azure(server, _azure_compute(placementGroupId=placement)).tiers()
    assert found is not None and not found.known
    assert position_labels(PositionFacts(metadata=found), {})[0] == {}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("{not json", "not JSON"),
        ('["compute"]', "compute is not a JSON object"),
        (_azure_compute(placementGroupId=7), "placementGroupId is not a string: int"),
        (_azure_compute(placementGroupId={"id": "pg"}), "placementGroupId is not a string: dict"),
        (_azure_compute(placementGroupId="p" * 300), "placementGroupId is not a usable id"),
        (_azure_compute(placementGroupId="pg\n1"), "placementGroupId is not a usable id"),
    ],
)
def test_azure_bad_answers_leave_the_position_unknown_and_say_why(
    server: MetadataServer, body: object, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="agent.position.metadata"):
        assert _azure(server, body).tiers() is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert "azure metadata" in line and reason in line, line
