"""No pod can stall admission (issue 43): extreme counts, quantities, lengths and container
counts are answered at once, fail-open and unmutated with a warning naming the field, while
ordinary pods keep being mutated beside them, and the server's memory stays bounded.

Real TLS to the full server with the shipped policies; a longer seeded run with the p99 and
the peak RSS is `python -m benchmarks --only bounded` (make bench).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import random
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.webhook.server.conftest import TlsFiles, admission_review, gpu_pod, server_config
from webhook.engine.pod_fields import MAX_CONTAINERS, MAX_DEVICES
from webhook.server.runner import WebhookServer

SHIPPED = Path(__file__).resolve().parents[3] / "policies"
GPU = "nvidia.com/gpu"


def inference_pod(**limits: Any) -> dict[str, Any]:
    pod = gpu_pod(policy="inference")
    pod["spec"]["containers"][0]["resources"] = {"limits": limits}
    return pod


def extreme_pod(rng: random.Random) -> dict[str, Any]:
    """One pod past some bound: a count, a quantity, a length or the container count."""
    pod = inference_pod(**{GPU: "1"})
    container = pod["spec"]["containers"][0]
    kind = rng.randrange(6)
    if kind == 0:
        container["resources"]["limits"][GPU] = rng.choice(
            ["1e30", "1000000", "4096", str(MAX_DEVICES + 1), "1e999999", 2**70]
        )
    elif kind == 1:
        container["resources"]["limits"]["cpu"] = rng.choice(["1e30", "100000", "1e400"])
    elif kind == 2:
        container["resources"]["limits"]["memory"] = rng.choice(["1e30", "9000Ei", "2Pi"])
    elif kind == 3:
        others = [copy.deepcopy(container) | {"name": f"c{i}"} for i in range(MAX_CONTAINERS)]
        pod["spec"]["containers"] += others
    elif kind == 4:
        term = {"matchExpressions": [{"key": f"k{i}", "operator": "Exists"} for i in range(65)]}
        pod["spec"]["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [term]}}}  # fmt: skip
    else:
        terms = [{"matchExpressions": [{"key": "zone", "operator": "In", "values": [str(i)]}]}
                 for i in range(rng.choice([65, 500]))]  # fmt: skip
        pod["spec"]["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": terms}}}  # fmt: skip
    return pod


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.fixture
async def shipped(tmp_path: Path, tls_files: TlsFiles) -> AsyncIterator[WebhookServer]:
    policies = tmp_path / "policies"
    shutil.copytree(SHIPPED, policies)
    async with WebhookServer(server_config(policies, tls_files)) as running:
        yield running


async def post(client: aiohttp.ClientSession, url: str, pod: dict[str, Any]) -> dict[str, Any]:
    # A liveness bound, not a speed check: the API server gives a webhook 10 s at most.
    timeout = aiohttp.ClientTimeout(total=10)
    async with client.post(url, json=admission_review(pod), timeout=timeout) as resp:
        assert resp.status == 200, await resp.text()
        body: dict[str, Any] = await resp.json()
    return body["response"]


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    raw = response.get("patch")
    return json.loads(base64.b64decode(raw)) if raw else []


@pytest.mark.parametrize(
    ("limits", "field"),
    [({GPU: "1e30"}, GPU), ({GPU: "1000000"}, GPU), ({GPU: "1", "memory": "1e400"}, "memory")],
)
async def test_an_extreme_pod_is_admitted_unchanged_with_the_field_named(
    shipped: WebhookServer, client: aiohttp.ClientSession, limits: dict[str, Any], field: str
) -> None:
    response = await post(client, shipped.url, inference_pod(**limits))
    assert response["allowed"] is True
    assert "patch" not in response
    (warning,) = response["warnings"]
    assert field in warning and "admitted unchanged" in warning, warning


async def test_ordinary_pods_keep_flowing_beside_extreme_ones_in_bounded_memory(
    shipped: WebhookServer, client: aiohttp.ClientSession
) -> None:
    url = shipped.url
    ordinary = inference_pod(**{GPU: "2"})
    for _ in range(20):  # warm: caches, the first TLS handshakes
        await post(client, url, ordinary)
    before = rss_bytes()
    rng = random.Random(43)
    for _ in range(3):
        pods = [(extreme_pod(rng), True) for _ in range(30)] + [(ordinary, False)] * 30
        rng.shuffle(pods)
        answers = await asyncio.gather(*(post(client, url, p) for p, _ in pods))
        for (pod, extreme), response in zip(pods, answers, strict=True):
            assert response["allowed"] is True
            if extreme:
                assert not patch_of(response), pod["spec"]["containers"][0]["resources"]
                assert any("admitted unchanged" in w for w in response["warnings"])
            else:
                assert patch_of(response), "an ordinary pod lost its mutation"
    # Bounded: no answer holds on to what an extreme pod made.
    assert rss_bytes() - before < 64 * 2**20
