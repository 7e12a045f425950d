"""`serve --numa-scheduling` over real HTTPS: kube-scheduler's extender calls answered from the
NodeResourceTopology watch, the admission warnings (no NUMA node has room now; the policy's
scheduler is not running), and a cluster without the CRD."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
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
)
from tests.webhook.server.fake_topology import TopologyApiServer
from tests.webhook.stores.test_node_store import FLEET
from webhook.server.runner import WebhookServer

NUMA_POLICY = """\
apiVersion: topoplace.io/v1alpha1
kind: PlacementPolicy
metadata:
  name: numa
spec:
  placement:
    singleNumaNode: true
    topologyManagerPolicies: [single-numa-node]
    numaAwareScheduler: topoplace-numa-scheduler
  resources:
    guaranteed: false
"""


def scheduled_pod(gpus: int) -> dict[str, Any]:
    """A pod as kube-scheduler holds it: defaulted, requests copied from limits."""
    pod = gpu_pod(gpus=gpus, policy="numa")
    for c in pod["spec"]["containers"]:
        limits = c.setdefault("resources", {}).setdefault("limits", {})
        limits["nvidia.com/gpu"] = str(gpus)
        c["resources"]["requests"] = dict(limits)
    pod["spec"]["schedulerName"] = "topoplace-numa-scheduler"
    return pod


def extender_args(pod: dict[str, Any], *nodes: str) -> dict[str, Any]:
    # k8s.io/kube-scheduler/extender/v1 ExtenderArgs: no JSON tags, Go field names.
    return {"Pod": pod, "Nodes": None, "NodeNames": list(nodes)}


def single_numa_dgx(name: str) -> dict[str, Any]:
    """A DGX H100 Node named `name` whose kubelet runs single-numa-node."""
    node = copy.deepcopy(FLEET["dgx-h100-a"])
    node["metadata"]["name"] = name
    node["metadata"].pop("uid", None)
    node["metadata"]["labels"]["topoplace.io/topology-manager-policy"] = "single-numa-node"
    return node


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[TopologyApiServer]:
    async with TopologyApiServer(tmp_path) as server:
        for name in ("dgx-h100-a", "dgx-h100-b"):
            server.node_store.put(single_numa_dgx(name))
        server.nrt_store.put(nrt("dgx-h100-a", [2, 2]))  # the fragmented node
        server.nrt_store.put(nrt("dgx-h100-b", [4, 0]))
        yield server


@pytest.fixture
def numa_policies(tmp_path: Path) -> Path:
    directory = tmp_path / "numa-policies"
    directory.mkdir()
    (directory / "numa.yaml").write_text(NUMA_POLICY)
    return directory


@contextlib.asynccontextmanager
async def numa_server(
    api: TopologyApiServer, policies: Path, tls: TlsFiles
) -> AsyncIterator[tuple[WebhookServer, str]]:
    config = server_config(
        policies,
        tls,
        numa_scheduling=True,
        node_cache=True,
        kubeconfig=api.write_kubeconfig(),
        lease_check_interval=0.1,
    )
    async with WebhookServer(config) as server:
        yield server, server.url.rsplit("/", 1)[0]


async def call(client: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    return await post_review(client, url, body)


async def test_filter_keeps_only_nodes_with_a_whole_numa_node_free(
    api: TopologyApiServer, numa_policies: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    args = extender_args(scheduled_pod(4), "dgx-h100-a", "dgx-h100-b", "no-topology-object")
    async with numa_server(api, numa_policies, tls_files) as (_, base):
        answer: dict[str, Any] = {}

        async def filtered() -> bool:
            status, body = await call(client, f"{base}/scheduler/filter", args)
            answer.update(body)
            return status == 200 and "dgx-h100-a" in body["FailedNodes"]

        await wait_until(filtered, "the NodeResourceTopology list")
        assert answer == {
            "NodeNames": ["dgx-h100-b", "no-topology-object"],
            "FailedNodes": {"dgx-h100-a": "no NUMA node has 4 free GPUs (free: 2, 2)"},
            "Error": "",
        }
        status, scores = await call(client, f"{base}/scheduler/prioritize", args)
        assert status == 200
        assert scores == [
            {"Host": "dgx-h100-a", "Score": 0},
            {"Host": "dgx-h100-b", "Score": 10},
            {"Host": "no-topology-object", "Score": 0},
        ]
        # A pod ends on dgx-h100-a: the watch event makes room there.
        api.nrt_store.put(nrt("dgx-h100-a", [4, 2]))

        async def room() -> bool:
            _, body = await call(client, f"{base}/scheduler/filter", args)
            return body["FailedNodes"] == {}

        await wait_until(room, "the MODIFIED object")


async def test_malformed_extender_args_get_400_with_the_reason(
    api: TopologyApiServer, numa_policies: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    async with numa_server(api, numa_policies, tls_files) as (_, base):
        for body, expected in (
            (b"{", "malformed ExtenderArgs"),
            ({"Pod": "x", "NodeNames": []}, "Pod: expected a Pod with a spec"),
            (extender_args(scheduled_pod(1)) | {"NodeNames": [3]}, "NodeNames: expected"),
        ):
            status, text = await call(client, f"{base}/scheduler/filter", body)
            assert status == 400 and expected in text


async def test_admission_says_what_is_wrong_now_and_that_the_scheduler_is_absent(
    api: TopologyApiServer, numa_policies: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    api.nrt_store.put(nrt("dgx-h100-b", [2, 2]))  # both nodes fragmented
    async with numa_server(api, numa_policies, tls_files) as (server, _):
        warnings: list[str] = []

        async def warned() -> bool:
            review = admission_review(gpu_pod(gpus=4, policy="numa"))
            _, body = await post_review(client, server.url, review)
            warnings[:] = body["response"].get("warnings") or []
            return len(warnings) == 2

        await wait_until(warned, "both warnings")
        assert warnings == [
            "topoplace: placement policy numa: none of the 2 matching nodes has room on one NUMA "
            "node now (dgx-h100-a: no NUMA node has 4 free GPUs (free: 2, 2)); the pod waits "
            "for a NUMA node to free, or its kubelet refuses it",
            "topoplace: scheduler 'topoplace-numa-scheduler' is not running (no Lease "
            "kube-system/topoplace-numa-scheduler): the pod stays Pending until it runs "
            "(placement.numaAwareScheduler)",
        ]
        renewed = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        api.leases[("kube-system", "topoplace-numa-scheduler")] = {
            "metadata": {"name": "topoplace-numa-scheduler", "namespace": "kube-system"},
            "spec": {"holderIdentity": "x", "leaseDurationSeconds": 15, "renewTime": renewed},
        }
        api.nrt_store.put(nrt("dgx-h100-b", [4, 0]))

        async def quiet() -> bool:
            review = admission_review(gpu_pod(gpus=4, policy="numa"))
            _, body = await post_review(client, server.url, review)
            return not body["response"].get("warnings")

        await wait_until(quiet, "the Lease and a free NUMA node")


async def test_without_the_crd_it_logs_once_and_serves_as_before(
    api: TopologyApiServer,
    numa_policies: Path,
    tls_files: TlsFiles,
    client: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    api.crd_installed = False
    caplog.set_level(logging.WARNING, logger="webhook.scheduler.nrt_cache")
    async with numa_server(api, numa_policies, tls_files) as (server, base):
        await wait_until(
            lambda: asyncio.sleep(0, result=len(api.nrt_requests) >= 1), "the list attempt"
        )
        status, body = await call(
            client, f"{base}/scheduler/filter", extender_args(scheduled_pod(4), "dgx-h100-a")
        )
        assert status == 200 and body["NodeNames"] == ["dgx-h100-a"]
        review = admission_review(gpu_pod(gpus=4, policy="numa"))
        status, answer = await post_review(client, server.url, review)
        assert status == 200 and answer["response"]["allowed"]
    absent = [r for r in caplog.records if "CRD not installed" in r.getMessage()]
    assert len(absent) == 1


def test_a_stale_lease_is_a_scheduler_that_stopped() -> None:
    from webhook.scheduler.leases import lease_problem

    now = datetime(2026, 1, 1, tzinfo=UTC)
    spec = {"leaseDurationSeconds": 15, "renewTime": (now - timedelta(seconds=60)).isoformat()}
    assert lease_problem("s", {"spec": spec}, now) == (
        "scheduler 's' is not running (Lease kube-system/s last renewed 60s ago)"
    )
    spec["renewTime"] = (now - timedelta(seconds=5)).isoformat()
    assert lease_problem("s", {"spec": spec}, now) is None


def test_extender_args_with_whole_nodes_or_lower_case_keys_are_read() -> None:
    from webhook.scheduler.extender import parse_args

    pod = scheduled_pod(1)
    nodes = {"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}
    # nodeCacheCapable false sends Node objects; Go decodes keys case-insensitively.
    assert parse_args({"Pod": pod, "Nodes": nodes, "NodeNames": None}).nodes == ("a", "b")
    assert parse_args({"pod": pod, "nodenames": ["c"]}).nodes == ("c",)


async def test_a_burst_counts_each_bound_pod_until_the_object_shows_it(
    api: TopologyApiServer, numa_policies: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    """Issue 45 over HTTPS: the pods kube-scheduler binds come back through the webhook's
    watch of bound pods; each takes its NUMA node off what the next one is judged on, and a
    kubelet's refusal of one the extender let through is counted."""
    async with numa_server(api, numa_policies, tls_files) as (server, base):
        await wait_until(
            lambda: asyncio.sleep(0, result=any(
                w.get("fieldSelector") == "spec.nodeName!=" for w in api.pods.watches
            )),
            "the watch of bound pods",
        )  # fmt: skip

        async def filtered(name: str) -> dict[str, Any]:
            pod = scheduled_pod(2)
            pod["metadata"].update(name=name, uid=f"uid-{name}")
            args = extender_args(pod, "dgx-h100-a")
            status, body = await call(client, f"{base}/scheduler/filter", args)
            assert status == 200
            if body["NodeNames"]:  # kube-scheduler binds it: the API server has it on the node
                pod["spec"]["nodeName"] = "dgx-h100-a"
                pod["status"] = {"phase": "Pending"}
                api.pods.add(pod)
            return dict(body)

        async def listed() -> bool:
            probe = extender_args(scheduled_pod(4), "dgx-h100-a")  # 2 + 2 free: fails once known
            _, body = await call(client, f"{base}/scheduler/filter", probe)
            return "dgx-h100-a" in body["FailedNodes"]

        await wait_until(listed, "the NodeResourceTopology list")
        answers = [await filtered(f"burst-{i}") for i in range(3)]
        assert [a["NodeNames"] for a in answers] == [["dgx-h100-a"], ["dgx-h100-a"], []]
        assert answers[2]["FailedNodes"] == {"dgx-h100-a": "2 GPUs asked, 0 free on the whole node"}
        api.pods.pods["uid-burst-0"]["status"]["reason"] = "TopologyAffinityError"
        api.pods.set_phase("uid-burst-0", "Failed")

        async def counted() -> bool:
            async with client.get(f"http://127.0.0.1:{server.metrics_port}/metrics") as resp:
                text = await resp.text()
            return 'topoplace_webhook_scheduler_predictions_total{outcome="refused"} 1.0' in text

        await wait_until(counted, "the refusal counted")
        assert (await filtered("after"))["NodeNames"] == ["dgx-h100-a"]  # its share freed


async def test_without_the_accounting_the_extender_judges_on_the_object_alone(
    api: TopologyApiServer, numa_policies: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    """`serve --no-scheduler-accounting` (for make bench-e2e's burst rows): no watch of bound
    pods, so every pod of a burst is judged on the same published counts, as before issue 45."""
    config = server_config(
        numa_policies,
        tls_files,
        numa_scheduling=True,
        scheduler_accounting=False,
        kubeconfig=api.write_kubeconfig(),
        lease_check_interval=0.1,
    )
    async with WebhookServer(config) as server:
        base = server.url.rsplit("/", 1)[0]

        async def passed(name: str) -> list[str]:
            pod = scheduled_pod(2)
            pod["metadata"].update(name=name, uid=f"uid-{name}")
            status, body = await call(
                client, f"{base}/scheduler/filter", extender_args(pod, "dgx-h100-a")
            )
            assert status == 200
            if body["NodeNames"]:  # kube-scheduler binds it: the API server has it on the node
                pod["spec"]["nodeName"] = "dgx-h100-a"
                pod["status"] = {"phase": "Pending"}
                api.pods.add(pod)
            return list(body["NodeNames"])

        async def listed() -> bool:
            probe = extender_args(scheduled_pod(4), "dgx-h100-a")
            _, body = await call(client, f"{base}/scheduler/filter", probe)
            return "dgx-h100-a" in body["FailedNodes"]

        await wait_until(listed, "the NodeResourceTopology list")
        assert [await passed(f"burst-{i}") for i in range(3)] == [["dgx-h100-a"]] * 3
        assert not any(w.get("fieldSelector") == "spec.nodeName!=" for w in api.pods.watches)
