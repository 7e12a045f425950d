"""`explain pod/NAME` and `explain job/NAME` read the object from an API server speaking the real
protocol: the stored (already mutated) object, explained where it could go now, its own pod
not counted on the node it holds, and its events printed after the table."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from common.cli.kubectl_plugin import main as kubectl_main
from tests.agent.sync.fake_apiserver import TOKEN
from tests.webhook.cli.test_explain_kubeconfig import FLEET, run
from tests.webhook.nodefit.conftest import EXAMPLE_NODES, POLICIES
from tests.webhook.server.fake_nodes import NodeApiServer
from webhook.cli.main import main as webhook_main


@dataclass
class LiveApiServer(NodeApiServer):
    """Adds GETs of one pod, one Job, and a namespace's events (field selector honoured)."""

    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)

    def add_routes(self, app: web.Application) -> None:
        super().add_routes(app)
        app.router.add_get("/api/v1/namespaces/{ns}/pods/{name}", self._pod)
        app.router.add_get("/apis/batch/v1/namespaces/{ns}/jobs/{name}", self._job)
        app.router.add_get("/api/v1/namespaces/{ns}/events", self._events)

    def _authorised(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {TOKEN}"

    @staticmethod
    def _not_found(kind: str, name: str) -> web.Response:
        status = {"kind": "Status", "code": 404, "message": f'{kind} "{name}" not found'}
        return web.json_response(status, status=404)

    async def _pod(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if not self._authorised(request):
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        for pod in self.pods.pods.values():
            meta = pod["metadata"]
            if (meta.get("namespace"), meta["name"]) == (ns, name):
                return web.json_response(pod)
        return self._not_found("pods", name)

    async def _job(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        if key not in self.jobs:
            return self._not_found("jobs.batch", key[1])
        return web.json_response(self.jobs[key])

    async def _events(self, request: web.Request) -> web.Response:
        wanted = dict(
            term.split("=", 1) for term in request.query.get("fieldSelector", "").split(",") if term
        )
        items = [
            e
            for e in self.events
            if e["metadata"]["namespace"] == request.match_info["ns"]
            and all(e["involvedObject"].get(k.split(".")[1]) == v for k, v in wanted.items())
        ]
        return web.json_response({"apiVersion": "v1", "kind": "EventList", "items": items})


def event(kind: str, name: str, reason: str, message: str, count: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{name}.1", "namespace": "ml-team"},
        "involvedObject": {"kind": kind, "name": name, "namespace": "ml-team"},
        "type": "Warning" if reason.startswith("Failed") else "Normal",
        "reason": reason,
        "message": message,
        "count": count,
        "lastTimestamp": "2026-12-06T08:00:00Z",
    }


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[LiveApiServer]:
    async with LiveApiServer(tmp_path) as server:
        for name in ("dgx-h100-a", "dgx-h100-b", "pcie-l40s-b"):
            server.node_store.put(FLEET[name])
        server.config_maps[("topoplace-system", "topoplace-policies")] = {
            p.name: p.read_text() for p in POLICIES.glob("*.yaml")
        }
        yield server


def ddp_rank(name: str, *, node: str | None = None) -> dict[str, Any]:
    pod = copy.deepcopy(yaml.safe_load((EXAMPLE_NODES.parent / "ddp-8gpu.yaml").read_text()))
    pod["metadata"].update(name=name, namespace="ml-team", uid=f"uid-{name}")
    pod["status"] = {"phase": "Running" if node else "Pending"}
    if node:
        pod["spec"]["nodeName"] = node
    return pod


async def test_a_pending_pod_is_explained_with_the_schedulers_events(api: LiveApiServer) -> None:
    api.pods.add(ddp_rank("busy-a", node="dgx-h100-a"))
    api.pods.add(ddp_rank("busy-b", node="dgx-h100-b"))
    api.pods.add(ddp_rank("waiting"))
    api.events.append(
        event("Pod", "waiting", "FailedScheduling", "0/3 nodes are available: ...", count=14)
    )
    kubeconfig = str(api.write_kubeconfig())
    code, out, err = await run(
        webhook_main, "explain", "--kubeconfig", kubeconfig, "-n", "ml-team", "pod/waiting"
    )
    assert code == 1, err  # both DGX H100s are taken by the two running ranks
    assert "Pod/waiting in ml-team: policy ddp-hgx-full-node" in out
    assert "free nvidia.com/gpu 0 (8 allocatable, 8 requested) < 8" in out
    assert "now: Pod/waiting is Pending, not bound to a node" in out
    assert "Warning  FailedScheduling (×14): 0/3 nodes are available: ..." in out


async def test_a_running_pod_does_not_crowd_itself_out(
    api: LiveApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.pods.add(ddp_rank("rank-0", node="dgx-h100-a"))
    monkeypatch.setenv("KUBECONFIG", str(api.write_kubeconfig()))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, out, err = await run(kubectl_main, "explain", "pod/rank-0", "-n", "ml-team")
    assert code == 0, err
    assert "2 of 3 nodes fit" in out  # its own 8 GPUs on dgx-h100-a are not held against it
    assert "now: Pod/rank-0 is Running on node dgx-h100-a" in out
    assert "no events for Pod/rank-0" in out


async def test_a_job_is_explained_by_its_pod_template(api: LiveApiServer) -> None:
    pod = ddp_rank("unused")
    template = {"metadata": {"labels": pod["metadata"]["labels"]}, "spec": pod["spec"]}
    api.jobs[("ml-team", "train")] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml-team", "uid": "uid-job"},
        "spec": {"template": template},
        "status": {"active": 1},
    }
    api.events.append(event("Job", "train", "SuccessfulCreate", "Created pod: train-x7"))
    code, out, err = await run(
        webhook_main, "explain", "--kubeconfig", str(api.write_kubeconfig()),
        "--namespace", "ml-team", "job/train",
    )  # fmt: skip
    assert code == 0, err
    assert "Job/train spec.template in ml-team: policy ddp-hgx-full-node" in out
    assert "now: Job/train spec.template is 1 pod(s) active" in out
    assert "Normal  SuccessfulCreate: Created pod: train-x7" in out


async def test_an_object_not_there_or_of_an_unknown_kind_is_one_line(api: LiveApiServer) -> None:
    kubeconfig = str(api.write_kubeconfig())
    code, out, err = await run(
        webhook_main, "explain", "--kubeconfig", kubeconfig, "-n", "ml-team", "pod/nope"
    )
    assert (code, out, err) == (2, "", "error: pod/nope not found in namespace ml-team\n")
    code, _, err = await run(webhook_main, "explain", "--kubeconfig", kubeconfig, "cronjob/x")
    assert code == 2 and err.startswith("error: explain reads ") and err.count("\n") == 1
    assert "not 'cronjob'" in err


async def test_a_live_object_needs_a_cluster(tmp_path: Path) -> None:
    nodes = str(EXAMPLE_NODES)
    code, _, err = await run(
        webhook_main, "explain", "--policies", str(POLICIES), "--nodes", nodes, "pod/x"
    )
    message = "error: pod/x is read from a cluster: give --kubeconfig, not --nodes\n"
    assert (code, err) == (2, message)
