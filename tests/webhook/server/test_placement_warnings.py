"""The placement warnings as the user gets them: in the AdmissionReview the real HTTPS server
answers, `topoplace: ` included, within 256 characters, the pointer to `kubectl topoplace
explain` kept however long the names, and in their order when several apply."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.webhook.placement_model.nrt import nrt
from tests.webhook.server.conftest import (
    TlsFiles,
    admission_review,
    gpu_pod,
    post_review,
    server_config,
    wait_until,
    warning_counts,
)
from tests.webhook.server.fake_topology import TopologyApiServer
from tests.webhook.server.test_numa_scheduling import NUMA_POLICY
from tests.webhook.stores.test_node_store import FLEET
from webhook.server.app import ServerConfig
from webhook.server.runner import WebhookServer
from webhook.warnings.kinds import WarningKind
from webhook.warnings.lines import EXPLAIN, LIMIT, PREFIX

# A pod label value, so at most 63 characters; node names may be far longer (253).
LONG_POLICY = "distributed-data-parallel-training-on-hgx-h100-with-rdma-pairs"
KEYS = [f"example.com/rack-requirement-with-a-long-name-{i}" for i in range(12)]
RACK = "rack-07-row-c-datacenter-frankfurt-east-2-hgx-h100-sxm5-640gb-infiniband-ndr-"


def long_policy() -> str:
    labels = "\n".join(f"      {k}: yes-it-is" for k in KEYS)
    return (
        "apiVersion: topoplace.io/v1alpha1\nkind: PlacementPolicy\n"
        f"metadata: {{name: {LONG_POLICY}}}\nspec:\n  placement:\n    requiredLabels:\n"
        f"{labels}\n"
    )


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    found = copy.deepcopy(FLEET["dgx-h100-a"])
    found["metadata"]["name"] = name
    found["metadata"].pop("uid", None)
    found["metadata"]["labels"].update(labels or {})
    return found


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[TopologyApiServer]:
    async with TopologyApiServer(tmp_path) as server:
        yield server


async def warnings_once_warm(
    client: aiohttp.ClientSession, server: WebhookServer, pod: dict[str, Any], count: int
) -> list[str]:
    """The warnings of the first answer that has `count` (the caches fill in the background)."""
    found: list[str] = []

    async def warm() -> bool:
        status, body = await post_review(client, server.url, admission_review(pod))
        assert status == 200 and body["response"]["allowed"] is True
        found[:] = body["response"].get("warnings") or []
        return len(found) >= count

    await wait_until(warm, f"{count} warnings")
    print("PEEK", found)
    return found


async def test_a_long_warning_keeps_the_pointer_to_explain(
    api: TopologyApiServer, tmp_path: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    # Twelve nodes, each missing a different required label: twelve distinct failing checks.
    for i in range(12):
        api.node_store.put(node(f"{RACK}{i:02d}", {k: "yes-it-is" for k in KEYS[:i]}))
    policies = tmp_path / "long-policies"
    policies.mkdir()
    (policies / "long.yaml").write_text(long_policy())
    config = server_config(policies, tls_files, node_cache=True, kubeconfig=api.write_kubeconfig())
    async with WebhookServer(config) as server:
        pod = gpu_pod(gpus=8, policy=LONG_POLICY)
        found = await warnings_once_warm(client, server, pod, 3)  # two from the engine
    (warning,) = [w for w in found if "no node fits" in w]
    # Twelve checks do not fit: the first stays, `…` stands for the others, the pointer whole.
    assert warning == (
        f"{PREFIX}no node fits placement policy {LONG_POLICY} for 8 GPUs: 1 node fail "
        f"{KEYS[0]} (absent), …{EXPLAIN}"
    )
    assert len(warning) <= LIMIT


def numa_fleet(api: TopologyApiServer, tmp_path: Path, tls_files: TlsFiles) -> ServerConfig:
    """Two long-named nodes, each NUMA node half taken; the NUMA-aware policy `numa` asking for
    GPU↔NIC pairs too, its scheduler without a Lease: a 4-GPU pod gets three warnings."""
    names = [f"{RACK}{i:02d}-{'x' * 100}" for i in range(2)]
    for name in names:
        api.node_store.put(node(name, {"topoplace.io/topology-manager-policy": "single-numa-node"}))
        api.nrt_store.put(nrt(name, [2, 2]))  # every NUMA node half taken: no room for 4 GPUs
    policies = tmp_path / "numa-policies"
    policies.mkdir()
    # The NUMA-aware policy, asking for GPU↔NIC pairs too; its scheduler has no Lease.
    (policies / "numa.yaml").write_text(
        NUMA_POLICY.replace("singleNumaNode: true", "singleNumaNode: true\n    gpuNicPairs: true")
    )
    return server_config(
        policies,
        tls_files,
        node_cache=True,
        numa_scheduling=True,
        kubeconfig=api.write_kubeconfig(),
        lease_check_interval=0.1,
    )


async def test_warnings_come_in_their_order_when_several_apply(
    api: TopologyApiServer, tmp_path: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    async with WebhookServer(numa_fleet(api, tmp_path, tls_files)) as server:
        room, pairs, scheduler = await warnings_once_warm(
            client, server, gpu_pod(gpus=4, policy="numa"), 3
        )
        # No node fits 16 GPUs on one NUMA node: that alone about the nodes, then the Lease.
        no_fit, scheduler_again = await warnings_once_warm(
            client, server, gpu_pod(gpus=16, policy="numa"), 2
        )
    assert all(len(w) <= LIMIT for w in (room, pairs, scheduler, no_fit, scheduler_again))
    # The long node names are cut or left out; what the warnings mean is kept.
    assert room.startswith(
        f"{PREFIX}placement policy numa: none of the 2 matching nodes has room on one NUMA "
        "node now (rack-07-row-c-"
    )
    assert room.endswith(
        "…: no NUMA node has 4 free GPUs (free: 2, 2)); the pod waits for a NUMA node to "
        "free, or its kubelet refuses it"
    )
    assert pairs.startswith(
        f"{PREFIX}placement policy numa for 4 GPUs: GPU↔NIC pairs not guaranteed on 2 of 2 "
        "nodes it fits (rack-07-"
    )
    assert pairs.endswith(
        "…, …): the pod requests no RDMA NIC (resources.rdma); pairs need resources.rdma or "
        f"spec.dra{EXPLAIN}"
    )
    assert (
        scheduler
        == scheduler_again
        == (
            f"{PREFIX}scheduler 'topoplace-numa-scheduler' is not running (no Lease "
            "kube-system/topoplace-numa-scheduler): the pod stays Pending until it runs "
            "(placement.numaAwareScheduler)"
        )
    )
    assert no_fit.startswith(f"{PREFIX}no node fits placement policy numa for 16 GPUs: ")
    assert no_fit.endswith(EXPLAIN)


async def test_each_warning_sent_is_counted_by_its_kind(
    api: TopologyApiServer, tmp_path: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    async with WebhookServer(numa_fleet(api, tmp_path, tls_files)) as server:
        before = await warning_counts(client, server, "numa")
        assert set(before) == {k.value for k in WarningKind}  # zeros from the policy's load
        await warnings_once_warm(client, server, gpu_pod(gpus=4, policy="numa"), 3)
        await warnings_once_warm(client, server, gpu_pod(gpus=16, policy="numa"), 2)
        warm = await warning_counts(client, server, "numa")
        answers = []
        for gpus in (4, 4, 16):  # the second 4-GPU answer is the answer cache's
            status, body = await post_review(
                client, server.url, admission_review(gpu_pod(gpus=gpus, policy="numa"))
            )
            assert status == 200
            answers.append(body["response"]["warnings"])
        after = await warning_counts(client, server, "numa")
    sent = {kind: after[kind] - warm[kind] for kind in after}
    engine = sum(len(a) for a in answers) - 3 * 2 - 2  # the rest are the engine's
    assert sent == {"no_room": 2, "pairs": 2, "scheduler": 3, "no_fit": 1, "engine": engine,
                    "kubelet_refusal": 0, "keep_together": 0, "internal_error": 0}  # fmt: skip
