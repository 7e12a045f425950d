"""The measured locality end to end in the agent's own processes: `run` learns the pods' UIDs
from its watch of the node's pods (a real API client against the fake API server) and serves
the locality series; `audit --node-name` lists them from the API server itself."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.agent.audit.cgroupfs import CgroupFs, Container
from tests.agent.audit.kubelet_stub import FakeKubelet, container, devices, pod
from tests.agent.sync.fake_apiserver import FakeApiServer
from tests.agent.sync.fake_pods import pod as api_pod
from tests.agent.sync.harness import wait_until

NODE = "gpu-node-3"
UID = "7d2c0b1e-3f4a-4b5c-8d6e-9f0a1b2c3d4e"
GiB = 1 << 30


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer(tmp_path) as server:
        yield server


@pytest.fixture
def node(fresh_machine: Callable[[str], Path], tmp_path: Path) -> Path:
    root = fresh_machine("dgx-h100")
    fs = CgroupFs(root, tmp_path / "proc")
    fs.add_pod(UID, [Container("c" * 64, range(4, 8), [0])], memory_bytes={0: GiB, 1: 3 * GiB})
    return root


def _env(repo_root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "NODE_NAME")}
    return {**env, "PYTHONPATH": str(repo_root)}


def locality(text: str) -> dict[tuple[str, str], float]:
    return {
        (s.labels["pod"], s.labels["verdict"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "topoplace_agent_pod_memory_locality"
    }


async def test_run_learns_the_uids_from_its_pod_watch(
    apiserver: FakeApiServer,
    kubelet: FakeKubelet,
    node: Path,
    python: str,
    repo_root: Path,
    tmp_path: Path,
) -> None:
    apiserver.add_node(NODE, labels={})
    (tmp_path / "datasets").mkdir()
    kubelet.serve(pod("ml", "a", container("w", devices("nvidia.com/gpu", ["0000:1b:00.0"]),
                                           cpus=[4, 5])))  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        python, "-m", "agent", "run", "--node-name", NODE,
        "--kubeconfig", str(apiserver.write_kubeconfig()),
        "--sysfs-root", str(node), "--no-nvml", "--no-node-resource-topology",
        "--dataset-root", str(tmp_path / "datasets"), "--resync-interval", "0.5",
        "--pod-resources-socket", str(kubelet.socket), "--audit-interval", "0.2",
        "--proc-root", str(tmp_path / "proc"),
        "--metrics-host", "127.0.0.1", "--metrics-port", "0",
        env=_env(repo_root), stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    lines: list[str] = []

    async def read_stderr() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            lines.append(raw.decode())

    reader = asyncio.create_task(read_stderr())
    pages: list[str] = []
    try:
        await wait_until(lambda: any("listening on 127.0.0.1" in line for line in lines),
                         within=30, what="the metrics server")  # fmt: skip
        port = next(int(m[1]) for line in lines
                    if (m := re.search(r"listening on 127\.0\.0\.1:(\d+)", line)))  # fmt: skip
        async with aiohttp.ClientSession() as http:

            async def seen(expected: dict[tuple[str, str], float], what: str) -> None:
                deadline = asyncio.get_running_loop().time() + 20
                while True:
                    async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
                        pages.append(await resp.text())
                    if locality(pages[-1]) == expected:
                        return
                    if asyncio.get_running_loop().time() > deadline:
                        raise AssertionError(f"{what}: last scrape {locality(pages[-1])}")
                    await asyncio.sleep(0.05)

            # No pod in the API yet: its UID unknown, so `unknown`, never `local`.
            await seen({("a", "unknown"): 1}, "the pod before the API lists it")
            apiserver.pods.add(api_pod("a", uid=UID, node=NODE))
            await seen({("a", "remote"): 1}, "the pod once the watch delivers its UID")
            assert (
                'topoplace_agent_pod_memory_local_ratio{namespace="ml",pod="a"} 0.25' in pages[-1]
            )
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(proc.wait(), 15)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await reader
    assert rc == 0, "".join(lines)
    said = [line for line in lines if "memory locality" in line]
    assert len(said) == 2, said  # unknown once, then remote once


async def test_audit_lists_the_pods_from_the_api_server_with_node_name(
    apiserver: FakeApiServer,
    kubelet: FakeKubelet,
    node: Path,
    python: str,
    repo_root: Path,
    tmp_path: Path,
) -> None:
    apiserver.pods.add(api_pod("a", uid=UID, node=NODE))
    kubelet.serve(pod("ml", "a", container("w", devices("nvidia.com/gpu", ["0000:1b:00.0"]),
                                           cpus=[4, 5])))  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        python, "-m", "agent", "audit", "--node-name", NODE,
        "--kubeconfig", str(apiserver.write_kubeconfig()), "--sysfs-root", str(node),
        "--no-nvml", "--pod-resources-socket", str(kubelet.socket),
        "--proc-root", str(tmp_path / "proc"), "--output", "json",
        env=_env(repo_root), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    (entry,) = json.loads(out)["locality"]["pods"]
    assert (entry["pod"], entry["verdict"], entry["memoryShare"]) == ("a", "remote", 0.25)
