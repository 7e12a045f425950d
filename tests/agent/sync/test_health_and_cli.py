"""Readiness and metrics over HTTP, and the two commands as a user runs them (subprocesses)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from argparse import Namespace
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.cli import cleanup as cmd_cleanup
from agent.discovery.discover import DiscoveryOptions, discover
from agent.sync.health.server import HealthServer
from agent.sync.labels.node_diff import owned_part
from common.backoff import Backoff, BackoffPolicy
from common.vocabulary import TOPOLOGY_ANNOTATION, Label, dataset_label
from tests.agent.sync.conftest import NODE
from tests.agent.sync.fake_apiserver import FakeApiServer
from tests.agent.sync.harness import complete_version, running_agent, wait_until

FOREIGN = {"kubernetes.io/hostname": NODE, "x-topoplace.io/gpus": "8"}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_readyz_flips_after_the_first_sync_and_metrics_count_it(
    apiserver: FakeApiServer, options: DiscoveryOptions
) -> None:
    fast = Backoff(BackoffPolicy(initial=0.05, cap=0.1, floor=0.02))
    async with (
        running_agent(apiserver, node=NODE, options=options, backoff=fast, watch=False) as agent,
        HealthServer(agent.metrics, host="127.0.0.1", port=0) as health,
        aiohttp.ClientSession(f"http://127.0.0.1:{health.port}") as http,
    ):
        await wait_until(lambda: len(agent.reconciles()) >= 2)  # the node is not there yet
        async with http.get("/readyz") as resp:
            assert resp.status == 503
        async with http.get("/healthz") as resp:
            assert resp.status == 200
        apiserver.add_node(NODE)
        await wait_until(lambda: agent.synced_count() >= 1)
        async with http.get("/readyz") as resp:
            assert resp.status == 200
        async with http.get("/metrics") as resp:
            assert resp.status == 200
            metrics = _samples(await resp.text())

    missing = agent.reconciles()[:-1]
    assert {e.result for e in missing} == {"node_missing"}
    assert metrics[("topoplace_agent_api_writes_total", ())] == 1
    assert metrics[("topoplace_agent_owned_labels", ())] == len(discover(options).labels)
    assert metrics[("topoplace_agent_last_successful_sync_timestamp_seconds", ())] > 0
    patched = ("topoplace_agent_reconciles_total", (("result", "patched"), ("trigger", "retry")))
    assert metrics[patched] == 1
    missing_key = (("result", "node_missing"), ("trigger", "start"))
    assert metrics[("topoplace_agent_reconciles_total", missing_key)] == 1
    not_found = ("topoplace_agent_api_requests_total", (("outcome", "not_found"), ("verb", "get")))
    assert metrics[not_found] == len(missing)
    count = ("topoplace_agent_discovery_duration_seconds_count", ())
    assert metrics[count] == len(agent.reconciles())


async def _agent_cli(python: str, repo_root: Path, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        python,
        "-m",
        "agent",
        *args,
        env={**os.environ, "PYTHONPATH": str(repo_root)},
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    return int(proc.returncode or 0), err.decode()


async def test_cleanup_leaves_only_foreign_labels_and_is_idempotent(
    apiserver: FakeApiServer, python: str, repo_root: Path
) -> None:
    owned = {Label.GPUS: "8", Label.GPU_NIC_PAIRS: "8", dataset_label("imagenet"): "2024-06"}
    apiserver.add_node(
        NODE,
        labels={**FOREIGN, **owned},
        annotations={TOPOLOGY_ANNOTATION: "{}", "node.alpha.kubernetes.io/ttl": "0"},
    )
    kubeconfig = str(apiserver.write_kubeconfig())
    args = ("cleanup", "--node-name", NODE, "--kubeconfig", kubeconfig)

    rc, err = await _agent_cli(python, repo_root, *args)
    assert rc == 0, err
    assert apiserver.labels(NODE) == FOREIGN
    assert apiserver.annotations(NODE) == {"node.alpha.kubernetes.io/ttl": "0"}
    assert "dataset imagenet removed" in err

    # Again, and for a node that does not exist: both are success and write nothing.
    # (In-process through the command's own run(), to spare two interpreter start-ups.)
    again = Namespace(node_name=NODE, kubeconfig=Path(kubeconfig))
    assert await asyncio.to_thread(cmd_cleanup.run, again) == 0
    gone = Namespace(node_name="gone", kubeconfig=Path(kubeconfig))
    assert await asyncio.to_thread(cmd_cleanup.run, gone) == 0
    assert apiserver.count("PATCH") == 1
    assert apiserver.labels(NODE) == FOREIGN


async def test_run_syncs_serves_readyz_and_exits_0_on_sigterm(
    apiserver: FakeApiServer,
    python: str,
    repo_root: Path,
    sysfs_root: Path,
    dataset_root: Path,
) -> None:
    complete_version(dataset_root, "imagenet", "2024-06")
    apiserver.add_node(NODE, labels=FOREIGN)
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    proc = await asyncio.create_subprocess_exec(
        python,
        "-m",
        "agent",
        "run",
        "--kubeconfig",
        str(apiserver.write_kubeconfig()),
        "--sysfs-root",
        str(sysfs_root),
        "--dataset-root",
        str(dataset_root),
        "--no-nvml",
        "--resync-interval",
        "0.2",
        "--metrics-host",
        "127.0.0.1",
        "--metrics-port",
        "0",
        env={**env, "PYTHONPATH": str(repo_root), "NODE_NAME": NODE},
        stderr=asyncio.subprocess.PIPE,
    )
    lines: list[str] = []

    async def read_stderr() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            lines.append(raw.decode())

    reader = asyncio.create_task(read_stderr())
    try:
        await wait_until(lambda: apiserver.count("GET") >= 3, within=30)
        port = next(
            int(m[1])
            for line in lines
            if (m := re.search(r"listening on 127\.0\.0\.1:(\d+)", line))
        )
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/readyz") as resp,
        ):
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(proc.wait(), 15)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await reader

    assert rc == 0, "".join(lines)
    assert owned_part(apiserver.labels(NODE)) == dict(
        discover(DiscoveryOptions(sysfs_root, dataset_root, None, False, False)).labels
    )
    assert apiserver.count("PATCH") == 1  # the resyncs found nothing to write
    assert "dataset imagenet 2024-06 became complete" in "".join(lines)
    # No kubelet here: the NodeResourceTopology publisher says so once, labelling goes on.
    assert "".join(lines).count("cannot publish NodeResourceTopology") == 1


def test_a_missing_kubeconfig_is_one_clear_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "nope.yaml"
    assert cmd_cleanup.run(Namespace(node_name=NODE, kubeconfig=missing)) == 2
    assert f"--kubeconfig {missing}: no such file" in caplog.text


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty; expected a kubeconfig"),
        ("clusters: 5\ncurrent-context: x\n", "clusters must be a list of named entries"),
        ("a: [" * 200, "nested deeper than 100 levels"),
        ("- [1, 2\n", "invalid YAML"),
    ],
)
def test_an_empty_or_malformed_kubeconfig_is_one_clear_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str, says: str
) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text(text)
    assert cmd_cleanup.run(Namespace(node_name=NODE, kubeconfig=bad)) == 2
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert says in record.getMessage()
    assert "\n" not in record.getMessage()
