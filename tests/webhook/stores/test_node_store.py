"""The node cache against an API server speaking the real list/watch protocol, and the
admission warning it adds over real HTTPS: silent while cold, never blocking, kept current
by watch events, relisting after 410 Gone, backing off on errors."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
import yaml

from common.backoff import Backoff, BackoffPolicy, RecordingSleep
from tests.agent.sync.fake_apiserver import Fault
from tests.webhook.nodefit.conftest import EXAMPLE_NODES
from tests.webhook.server.conftest import (
    TlsFiles,
    admission_review,
    gpu_pod,
    post_review,
    server_config,
    wait_until,
)
from tests.webhook.server.fake_nodes import NodeApiServer
from webhook.engine.recipe import mutate
from webhook.policy.loader import load_policy_dir
from webhook.server.runner import WebhookServer, freeze_when_loaded
from webhook.stores.node_store import NodeStore
from webhook.warnings.kinds import WarningKind
from webhook.warnings.placement import PlacementWarnings

FLEET = {n["metadata"]["name"]: n for n in yaml.safe_load(EXAMPLE_NODES.read_text())["items"]}
FAR = ("pcie-l40s-a", "workstation-a", "hyperv-gpu-a")  # no GPU-NIC link at PXB or better
FAST = BackoffPolicy(initial=0.01, cap=0.05, floor=0.01)


async def until(check: Callable[[], bool], what: str) -> None:
    async def poll() -> bool:
        return check()

    await wait_until(poll, what)


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[NodeApiServer]:
    async with NodeApiServer(tmp_path) as server:
        for name in FAR:
            server.node_store.put(FLEET[name])
        yield server


@contextlib.asynccontextmanager
async def following(cache: NodeStore, api: NodeApiServer) -> AsyncIterator[NodeStore]:
    task = asyncio.create_task(cache.run(api.write_kubeconfig()))
    try:
        yield cache
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def ddp_check(cache: NodeStore, policy_dir: Path, gpus: int = 2) -> str | None:
    """The no-fit warning (ddp asks for GPU↔NIC pairs too: a node it fits may add another)."""
    policies = load_policy_dir(policy_dir)
    result = mutate(gpu_pod(gpus=gpus), "ml-team", policies)
    warnings = PlacementWarnings(nodes=cache)(result.pod, policies.get("ddp"))
    return next((w.line for w in warnings if w.kind is WarningKind.NO_FIT), None)


async def test_silent_until_the_first_list_then_warns(api: NodeApiServer, policy_dir: Path) -> None:
    await api.stop_listening()
    backoff = Backoff(FAST)
    cache = NodeStore(backoff=backoff)
    async with following(cache, api):
        await until(lambda: backoff.attempts >= 2, "two refused attempts")
        assert not cache.ready
        assert ddp_check(cache, policy_dir) is None  # cold: says nothing
        await api.start_listening()
        await until(lambda: cache.ready, "the first list")
        warning = ddp_check(cache, policy_dir)
    assert warning == (
        "topoplace: no node fits placement policy ddp for 2 GPUs: 3 nodes fail gpu-nic-link "
        "(NODE, PHB); run `kubectl topoplace explain`"
    )


async def test_watch_events_keep_the_verdict_current(api: NodeApiServer, policy_dir: Path) -> None:
    cache = NodeStore()
    async with following(cache, api):
        await until(lambda: "watch" in api.node_requests, "the watch")
        assert ddp_check(cache, policy_dir) is not None
        api.node_store.put(FLEET["dgx-a100-a"])  # PXB, 8 GPU-NIC pairs
        await until(lambda: ddp_check(cache, policy_dir) is None, "the ADDED node to fit")
        changed = copy.deepcopy(FLEET["dgx-a100-a"])
        changed["metadata"]["labels"]["topoplace.io/gpu-nic-link"] = "SYS"
        api.node_store.put(changed)
        await until(lambda: ddp_check(cache, policy_dir) is not None, "the MODIFIED node")
        api.node_store.remove("pcie-l40s-a")
        await until(lambda: len(cache.index) == 3, "the DELETED node to go")
    assert api.node_requests[:2] == ["list", "watch"] and cache.lists == 1


async def test_an_expired_watch_relists(api: NodeApiServer) -> None:
    cache = NodeStore()
    async with following(cache, api):
        await until(lambda: cache.ready and "watch" in api.node_requests, "the watch")
        api.node_store.delete_quietly("uid-workstation-a")  # missed while the watch was gone
        api.node_store.expire_watches()
        api.node_store.put(FLEET["dgx-a100-a"])  # the store moves on past the compaction
        await until(lambda: cache.lists >= 2, "the relist after 410 Gone")
        names = sorted(v.name for v in cache.index.views())
        assert names == ["dgx-a100-a", "hyperv-gpu-a", "pcie-l40s-a"]


async def test_list_errors_back_off_and_honour_retry_after(api: NodeApiServer) -> None:
    api.faults.extend([Fault(500, method="LIST"), Fault(429, retry_after="3", method="LIST")])
    sleep = RecordingSleep()
    cache = NodeStore(sleep=sleep)
    async with following(cache, api):
        await until(lambda: cache.ready, "the list after two failures")
    assert api.node_requests[:3] == ["list", "list", "list"]
    assert len(sleep.delays) >= 2 and sleep.delays[1] >= 3


async def test_thousands_of_nodes_come_in_pages(api: NodeApiServer) -> None:
    for i in range(1200):
        node = copy.deepcopy(FLEET["dgx-h100-a"])
        node["metadata"]["name"] = f"gpu-{i:04d}"
        api.node_store.put(node)
    cache = NodeStore()
    async with following(cache, api):
        await until(lambda: "watch" in api.node_requests, "the watch after the paged list")
        assert len(cache.index) == 1203
    assert api.node_requests[:4] == ["list", "list", "list", "watch"]


async def test_a_list_from_the_cache_pages_by_its_continue_token(api: NodeApiServer) -> None:
    """explain --kubeconfig lists with resourceVersion 0; a server that still pages it must
    be followed by the continue token alone (it refuses both)."""
    from kubernetes_asyncio import client

    from common.kube.read import list_all
    from common.kube_config import load_configuration

    for i in range(1200):
        node = copy.deepcopy(FLEET["dgx-h100-a"])
        node["metadata"]["name"] = f"gpu-{i:04d}"
        api.node_store.put(node)
    async with client.ApiClient(await load_configuration(api.write_kubeconfig())) as raw:
        items, _ = await list_all(client.CoreV1Api(raw).list_node, resource_version="0")
    assert len(items) == 1203 and api.node_requests == ["list", "list", "list"]


async def admit(
    session: aiohttp.ClientSession, server: WebhookServer, pod: dict[str, Any]
) -> dict[str, Any]:
    status, body = await post_review(session, server.url, admission_review(pod))
    assert status == 200
    return body["response"]


@pytest.fixture
async def session(tls_files: TlsFiles) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(ssl=tls_files.client_context())
    async with aiohttp.ClientSession(connector=connector) as client:
        yield client


async def test_the_webhook_warns_over_https_and_never_waits(
    api: NodeApiServer, policy_dir: Path, tls_files: TlsFiles, session: aiohttp.ClientSession
) -> None:
    await api.stop_listening()  # cold: the API server is unreachable at first
    config = server_config(
        policy_dir, tls_files, node_cache=True, kubeconfig=api.write_kubeconfig()
    )
    async with WebhookServer(config) as server:
        assert server.state is not None and server.state.nodes is not None
        cold = await admit(session, server, gpu_pod(gpus=2))
        assert cold["allowed"] is True and "patch" in cold
        assert not any("no node fits" in w for w in cold.get("warnings", []))
        await api.start_listening()
        nodes = server.state.nodes
        await until(lambda: nodes.ready, "the webhook's first node list")
        warm = await admit(session, server, gpu_pod(gpus=2))
        assert warm["allowed"] is True and "patch" in warm
        (warning,) = [w for w in warm["warnings"] if "no node fits" in w]
        assert "3 nodes fail gpu-nic-link (NODE, PHB)" in warning and len(warning) <= 256
        plain = await admit(session, server, gpu_pod(gpus=2, policy=None))
        assert "warnings" not in plain  # pods that did not opt in are never judged


async def test_carries_says_whether_some_node_has_a_label(api: NodeApiServer) -> None:
    cache = NodeStore()
    assert cache.carries("topoplace.io/network-tier-2") is None  # cold: not known yet
    async with following(cache, api):
        await until(lambda: "watch" in api.node_requests, "the watch")
        assert cache.carries("topoplace.io/network-tier-2") is False
        placed = copy.deepcopy(FLEET["dgx-a100-a"])
        placed["metadata"]["labels"]["topoplace.io/network-tier-2"] = "b1"
        api.node_store.put(placed)
        await until(lambda: cache.carries("topoplace.io/network-tier-2") is True, "the label")


async def test_serve_freezes_the_collector_once_the_first_node_list_is_in(
    api: NodeApiServer, policy_dir: Path, tls_files: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Frozen before the list (as until issue 47), the whole node index stayed in the set
    every full collection rescans."""
    await api.stop_listening()  # the first list waits for this
    seen: list[bool] = []  # the cache's readiness each time gc.freeze() runs
    config = server_config(
        policy_dir, tls_files, node_cache=True, kubeconfig=api.write_kubeconfig()
    )
    async with WebhookServer(config, freeze_gc=True) as server:
        assert server.state is not None and server.state.nodes is not None
        nodes = server.state.nodes
        monkeypatch.setattr(gc, "freeze", lambda: seen.append(nodes.ready))
        await api.start_listening()
        await until(lambda: bool(seen), "gc.freeze()")
    assert seen == [True]


async def test_freeze_does_not_wait_forever_for_a_list_that_never_comes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frozen: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    state = SimpleNamespace(nodes=NodeStore())  # never listed
    await freeze_when_loaded(state, wait_s=0.01)  # type: ignore[arg-type]
    assert frozen == [True]
