"""The fake API server answers the real kubernetes-asyncio client the way kube-apiserver does,
so the agent's tests exercise the real protocol (content types, Status objects, versions)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client, config

from tests.agent.sync.fake_apiserver import JSON_PATCH, MERGE, STRATEGIC, FakeApiServer

NODE = "n1"


@pytest.fixture
async def core(apiserver: FakeApiServer) -> AsyncIterator[client.CoreV1Api]:
    apiserver.add_node(NODE, labels={"a": "1", "b": "2"}, annotations={"c": "3"})
    cfg = client.Configuration()
    await config.load_kube_config(
        config_file=str(apiserver.write_kubeconfig()), client_configuration=cfg
    )
    async with client.ApiClient(configuration=cfg) as api:
        yield client.CoreV1Api(api)


def _rv(node: client.V1Node) -> int:
    return int(node.metadata.resource_version)


async def test_merge_and_strategic_merge_patches_null_delete_and_bump_the_version(
    apiserver: FakeApiServer, core: client.CoreV1Api
) -> None:
    before = await core.read_node(NODE)
    merged = await core.patch_node(
        NODE, {"metadata": {"labels": {"a": None, "z": "9"}}}, _content_type=MERGE
    )
    assert merged.metadata.labels == {"b": "2", "z": "9"}
    strategic = await core.patch_node(NODE, {"metadata": {"annotations": {"c": None}}})
    assert not strategic.metadata.annotations
    assert _rv(before) < _rv(merged) < _rv(strategic)
    assert [r.content_type for r in apiserver.requests if r.method == "PATCH"] == [
        MERGE,
        STRATEGIC,  # the client's own choice for a dict body
    ]


async def test_json_patch_and_a_no_op_write_that_keeps_the_version(
    apiserver: FakeApiServer, core: client.CoreV1Api
) -> None:
    patched = await core.patch_node(
        NODE, [{"op": "replace", "path": "/metadata/labels/a", "value": "5"}]
    )
    assert patched.metadata.labels["a"] == "5"
    assert apiserver.requests[-1].content_type == JSON_PATCH
    again = await core.patch_node(NODE, {"metadata": {"labels": {"a": "5"}}}, _content_type=MERGE)
    assert again.metadata.resource_version == patched.metadata.resource_version


async def test_missing_node_stale_version_and_invalid_label_get_status_objects(
    core: client.CoreV1Api,
) -> None:
    with pytest.raises(client.ApiException) as missing:
        await core.read_node("nope")
    status = json.loads(missing.value.body)
    assert (missing.value.status, status["kind"], status["reason"]) == (404, "Status", "NotFound")

    stale = {"metadata": {"resourceVersion": "1", "labels": {"a": "x"}}}
    with pytest.raises(client.ApiException) as conflict:
        await core.patch_node(NODE, stale, _content_type=MERGE)
    assert conflict.value.status == 409

    bad = {"metadata": {"labels": {"topoplace.io/gpus": "not a value!"}}}
    with pytest.raises(client.ApiException) as invalid:
        await core.patch_node(NODE, bad, _content_type=MERGE)
    assert (invalid.value.status, json.loads(invalid.value.body)["reason"]) == (422, "Invalid")
    assert (await core.read_node(NODE)).metadata.labels == {"a": "1", "b": "2"}
