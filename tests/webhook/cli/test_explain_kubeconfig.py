"""`explain --kubeconfig` and `kubectl topoplace explain` against an API server speaking the
real protocol: nodes listed, bound pods' requests taken off allocatable, policies read from
the ConfigMap the webhook serves."""

from __future__ import annotations

import asyncio
import io
import json
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.cli.kubectl_plugin import main as kubectl_main
from tests.webhook.nodefit.conftest import EXAMPLE_NODES, POLICIES
from tests.webhook.server.fake_nodes import NodeApiServer
from webhook.cli.main import main as webhook_main

FLEET = {n["metadata"]["name"]: n for n in yaml.safe_load(EXAMPLE_NODES.read_text())["items"]}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[NodeApiServer]:
    async with NodeApiServer(tmp_path) as server:
        for name in ("dgx-h100-a", "dgx-h100-b", "pcie-l40s-b"):
            server.node_store.put(FLEET[name])
        server.config_maps[("topoplace-system", "topoplace-policies")] = {
            p.name: p.read_text() for p in POLICIES.glob("*.yaml")
        }
        yield server


def bound_pod(name: str, node: str, gpus: int, phase: str = "Running") -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus), "cpu": "8", "memory": "64Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "i", "resources": {"limits": limits}}],
        },
        "status": {"phase": phase},
    }


async def run(entry: Callable[[Sequence[str]], int], *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()

    def call() -> int:
        with redirect_stdout(out), redirect_stderr(err):
            return entry(list(argv))

    # The command runs its own event loop; the fake API server keeps serving on this one.
    code = await asyncio.to_thread(call)
    return code, out.getvalue(), err.getvalue()


def ddp_pod(tmp_path: Path) -> Path:
    path = tmp_path / "pod.yaml"
    path.write_text((EXAMPLE_NODES.parent / "ddp-8gpu.yaml").read_text())
    return path


async def test_bound_pods_take_their_requests_off_allocatable(
    api: NodeApiServer, tmp_path: Path
) -> None:
    api.pods.add(bound_pod("busy", "dgx-h100-b", 4))
    api.pods.add(bound_pod("done", "dgx-h100-a", 8, phase="Succeeded"))  # holds nothing
    code, out, err = await run(
        webhook_main, "explain", "--kubeconfig", str(api.write_kubeconfig()),
        "--output", "json", str(ddp_pod(tmp_path)),
    )  # fmt: skip
    assert code == 0, err
    verdicts = {n["node"]: n for n in json.loads(out)["nodes"]}
    assert verdicts["dgx-h100-a"]["fits"] is True
    assert verdicts["dgx-h100-b"]["reason"] == (
        "free nvidia.com/gpu 4 (8 allocatable, 4 requested) < 8"
    )
    assert verdicts["pcie-l40s-b"]["reason"] == "gpu-nic-link is NODE; policy needs PIX"


async def test_kubectl_plugin_uses_the_current_context(
    api: NodeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(api.write_kubeconfig()))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    api.pods.add(bound_pod("a", "dgx-h100-a", 8))
    api.pods.add(bound_pod("b", "dgx-h100-b", 8))
    code, out, err = await run(kubectl_main, "explain", str(ddp_pod(tmp_path)))
    assert code == 1, err  # both DGX H100 nodes are full now
    assert "0 of 3 nodes fit" in out and "free nvidia.com/gpu 0 (8 allocatable" in out


async def test_a_missing_policies_config_map_is_named(api: NodeApiServer, tmp_path: Path) -> None:
    api.config_maps.clear()
    code, _, err = await run(
        webhook_main, "explain", "--kubeconfig", str(api.write_kubeconfig()), str(ddp_pod(tmp_path))
    )
    assert code == 2 and 'configmaps "topoplace-policies" not found' in err


async def test_no_cluster_configuration_is_a_clear_error(tmp_path: Path) -> None:
    code, _, err = await run(
        webhook_main, "explain", "--kubeconfig", str(tmp_path / "absent"), str(ddp_pod(tmp_path))
    )
    assert code == 2 and "no such file" in err
    assert os.environ.get("KUBERNETES_SERVICE_HOST") is None or True
