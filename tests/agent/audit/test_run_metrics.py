"""`topoplace-agent run` as the DaemonSet runs it: the placement audit on /metrics beside
the labelling, series gone with their pod, and a kubelet that vanishes without stopping the
labels."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.agent.audit.kubelet_stub import FakeKubelet, container, devices, pod
from tests.agent.sync.fake_apiserver import FakeApiServer
from tests.agent.sync.harness import wait_until

NODE = "gpu-node-3"
Machine = Callable[[str], Path]


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer(tmp_path) as server:
        yield server


def alignment(text: str) -> dict[tuple[str, str], float]:
    return {
        (s.labels["pod"], s.labels["verdict"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "topoplace_agent_gpu_container_alignment"
    }


async def test_run_serves_the_audit_and_keeps_labelling_without_a_kubelet(
    apiserver: FakeApiServer,
    kubelet: FakeKubelet,
    built_machine: Machine,
    python: str,
    repo_root: Path,
    tmp_path: Path,
) -> None:
    apiserver.add_node(NODE, labels={})
    (tmp_path / "datasets").mkdir()
    kubelet.serve(
        pod("ml", "a", container("w", devices("nvidia.com/gpu", ["0000:1b:00.0"]), cpus=[4, 5])),
        pod("ml", "b", container("w", devices("nvidia.com/gpu", ["0000:9d:00.0"]), cpus=[4, 5])),
    )
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    proc = await asyncio.create_subprocess_exec(
        python, "-m", "agent", "run", "--node-name", NODE,
        "--kubeconfig", str(apiserver.write_kubeconfig()),
        "--sysfs-root", str(built_machine("dgx-h100")), "--no-nvml",
        "--dataset-root", str(tmp_path / "datasets"), "--resync-interval", "0.5",
        "--pod-resources-socket", str(kubelet.socket), "--audit-interval", "0.2",
        "--metrics-host", "127.0.0.1", "--metrics-port", "0",
        env={**env, "PYTHONPATH": str(repo_root)},
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    lines: list[str] = []

    async def read_stderr() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            lines.append(raw.decode())

    reader = asyncio.create_task(read_stderr())
    pages: list[str] = []

    async def scrape(http: aiohttp.ClientSession, port: int) -> str:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
            pages.append(await resp.text())
            return pages[-1]

    try:
        await wait_until(
            lambda: any("listening on 127.0.0.1" in line for line in lines), within=30,
            what="the metrics server",
        )  # fmt: skip
        port = next(
            int(m[1])
            for line in lines
            if (m := re.search(r"listening on 127\.0\.0\.1:(\d+)", line))
        )
        async with aiohttp.ClientSession() as http:

            async def seen(expected: dict[tuple[str, str], float], what: str) -> None:
                deadline = asyncio.get_running_loop().time() + 20
                while alignment(await scrape(http, port)) != expected:
                    if asyncio.get_running_loop().time() > deadline:
                        raise AssertionError(f"{what}: last scrape {alignment(pages[-1])}")
                    await asyncio.sleep(0.05)

            await seen({("a", "aligned"): 1, ("b", "cpus-remote"): 1}, "both pods audited")
            kubelet.serve(
                pod("ml", "a", container("w", devices("nvidia.com/gpu", ["0000:1b:00.0"]),
                                         cpus=[4, 5])),
            )  # fmt: skip
            await seen({("a", "aligned"): 1}, "pod b's series gone with it")
            kubelet.stop()
            await seen({}, "series dropped while the kubelet is away")
            assert "topoplace_agent_pod_resources_up 0.0" in pages[-1]
            gets = apiserver.count("GET")
            await wait_until(lambda: apiserver.count("GET") >= gets + 2, within=20,
                             what="labelling to go on without a kubelet")  # fmt: skip
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(proc.wait(), 15)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await reader
    assert rc == 0, "".join(lines)
    said = [line for line in lines if "no placement audit" in line]
    assert len(said) == 1, said  # once, though it polled many times
    assert apiserver.labels(NODE)["topoplace.io/gpus"] == "8"
