"""Memory: the agent's RSS at steady state, the webhook's after start, what each heavy
import costs.

`topoplace-agent run` syncs a node on the in-process fake API server (tests/agent/sync) with
a short resync interval; its RSS is read from /proc after a few seconds of resyncs. Peak RSS
of `serve` under load is measured by the webhook bench, in the process it loaded; here,
`serve` as the webhook bench starts it (node and claim-template caches on), fed 5 nodes by
the stand-in API server, once its first pod got a fit verdict (issue 47's goal: ≤ 100 MB).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.procs import peak_rss_mb, rss_mb, start_server
from benchmarks.webhook.servers import await_fit_verdict, start_ours, write_serving_pair
from benchmarks.webhook.workload import admission_review, worker_pod, write_policy_dir

__all__ = ["run_memory_bench"]

_REPO = Path(__file__).resolve().parent.parent
_PROBE = """
import sys
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) / 1024
before = rss()
for name in sys.argv[1:]:
    __import__(name)
print(before, rss())
"""

_IMPORTS = {
    "python alone": [],
    "kubernetes_asyncio (client + config)": [
        "kubernetes_asyncio.client",
        "kubernetes_asyncio.config",
    ],
    "aiohttp + prometheus_client": ["aiohttp.web", "prometheus_client"],
    "webhook server modules": ["webhook.server.app", "webhook.engine.recipe"],
    "agent sync modules": ["agent.sync.labels.loop", "agent.discovery.discover"],
}


def _import_cost(modules: list[str]) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *modules],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(_REPO)},
    ).stdout.split()
    return float(out[0]), float(out[1])


async def _agent_steady_state_rss(seconds: float) -> tuple[float, float, int]:
    """(RSS MB, peak RSS MB, resync GETs) of `agent run` after `seconds` of resyncs."""
    from tests.agent.sync.fake_apiserver import FakeApiServer
    from tests.agent.sync.harness import make_tiny_sysfs

    with tempfile.TemporaryDirectory() as tmp:
        async with FakeApiServer(tmp_dir=Path(tmp)) as server:
            server.add_node("bench-node")
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agent",
                "--log-level",
                "warning",
                "run",
                "--node-name",
                "bench-node",
                "--kubeconfig",
                str(server.write_kubeconfig()),
                "--sysfs-root",
                str(make_tiny_sysfs(Path(tmp) / "sys")),
                "--dataset-root",
                str(Path(tmp) / "datasets"),
                "--no-nvml",
                "--resync-interval",
                "0.2",
                "--metrics-host",
                "127.0.0.1",
                "--metrics-port",
                "0",
                env={**os.environ, "PYTHONPATH": str(_REPO)},
                stderr=asyncio.subprocess.DEVNULL,
            )
            await asyncio.sleep(seconds)
            rss, peak = rss_mb(proc.pid), peak_rss_mb(proc.pid)
            proc.terminate()
            await proc.wait()
            return rss, peak, server.count("GET")


def _webhook_started_rss(nodes: int) -> float:
    """RSS MB of `serve` with its caches filled from `nodes` nodes, before any load."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ca, cert, key = write_serving_pair(work)
        write_policy_dir(work / "policies")
        env = {**os.environ, "PYTHONPATH": str(_REPO)}
        stub = ["-m", "benchmarks.webhook.apiserver_stub", "--nodes", str(nodes), "--dir", tmp]
        api = start_server("apiserver", [sys.executable, *stub], log=work / "api.log", env=env)
        try:
            tls = ["--tls-cert", str(cert), "--tls-key", str(key)]
            ours = start_ours(work, tls, env, api_kubeconfig=work / "kubeconfig")
            try:
                await_fit_verdict(ours, admission_review(worker_pod(gpus=4)), ca)
                return rss_mb(ours.process.pid)
            finally:
                ours.stop()
        finally:
            api.stop()


def run_memory_bench() -> list[dict[str, Any]]:
    rss, peak, gets = asyncio.run(_agent_steady_state_rss(8.0))
    started = _webhook_started_rss(5)
    rows: list[dict[str, Any]] = [
        {
            "process": f"topoplace-agent run, steady state ({gets} resyncs)",
            "RSS MB": rss,
            "peak RSS MB": peak,
            "target": "≤ 100 MB",
            "met": "yes" if peak <= 100 else "NO",
        },
        {
            "process": "topoplace-webhook serve, after start (node cache on, 5 nodes)",
            "RSS MB": started,
            "target": "≤ 100 MB",
            "met": "yes" if started <= 100 else "NO",
        },
    ]
    for label, modules in _IMPORTS.items():
        before, after = _import_cost(modules)
        rows.append(
            {
                "process": f"import {label}",
                "RSS MB": after,
                "import cost MB": after - before,
            }
        )
    return rows


if __name__ == "__main__":
    from benchmarks.table import markdown_table

    print(markdown_table(run_memory_bench()))
