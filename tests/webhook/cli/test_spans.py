"""`topoplace-webhook spans` and `kubectl topoplace spans` as users run them: from `kubectl get
-o yaml` files, and from an API server speaking the real protocol (the current context by
default), with clear errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.cli.kubectl_plugin import main as kubectl_main
from tests.webhook.cli.test_explain_kubeconfig import run
from tests.webhook.server.fake_nodes import NodeApiServer
from tests.webhook.spans.fleet import BLOCKS, node, pod
from webhook.cli.main import main as webhook_main

JOB = {"batch.kubernetes.io/job-name": "train"}


def listed(tmp_path: Path, name: str, items: list[dict[str, Any]]) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def job_over(*nodes: str) -> list[dict[str, Any]]:
    return [pod(f"train-{i}", n, JOB) for i, n in enumerate(nodes)]


async def test_from_files_a_table_and_json(tmp_path: Path) -> None:
    nodes = listed(tmp_path, "nodes", [node(n) for n in BLOCKS])
    pods = listed(tmp_path, "pods", job_over("w1", "w2", "w4", "w4"))
    code, out, err = await run(webhook_main, "spans", "--nodes", str(nodes), "--pods", str(pods))
    assert code == 0, err
    assert out.splitlines()[1].split()[:5] == ["ml", "Job", "train", "4", "3"]
    code, out, err = await run(
        webhook_main, "spans", "--nodes", str(nodes), "--pods", str(pods), "-o", "json"
    )
    assert code == 0, err
    (doc,) = json.loads(out)["workloads"]
    assert doc["domains"]["network-tier-2"] == 2 and doc["maxHops"] == 5


async def test_a_namespace_filters_the_workloads(tmp_path: Path) -> None:
    nodes = listed(tmp_path, "nodes", [node(n) for n in BLOCKS])
    pods = listed(tmp_path, "pods", [*job_over("w1"), pod("t", "w2", JOB, namespace="other")])
    code, out, err = await run(
        webhook_main, "spans", "--nodes", str(nodes), "--pods", str(pods), "-n", "other"
    )
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()[1:-1]] == ["other"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pods", "p.yaml"], "--pods FILE and --nodes FILE go together"),
        (["--nodes", "absent.yaml", "--pods", "absent.yaml"], "cannot read the nodes or pods"),
    ],
)
async def test_bad_input_is_named_and_exits_2(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    code, out, err = await run(
        webhook_main, "spans", *[str(tmp_path / a) if a.endswith(".yaml") else a for a in argv]
    )
    assert code == 2 and message in err and out == ""


async def test_kubectl_plugin_reads_the_current_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with NodeApiServer(tmp_path) as api:
        for name in BLOCKS:
            api.node_store.put(node(name))
        for p in job_over("w1", "w3"):
            api.pods.add(p)
        api.pods.add(pod("train-9", "w5", JOB, phase="Succeeded"))  # finished: not placed
        monkeypatch.setenv("KUBECONFIG", str(api.write_kubeconfig()))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        code, out, err = await run(kubectl_main, "spans", "-o", "json")
    assert code == 0, err
    (doc,) = json.loads(out)["workloads"]
    assert (doc["pods"], doc["nodes"], doc["maxHops"]) == (2, 2, 3)  # w1, w3: one block
