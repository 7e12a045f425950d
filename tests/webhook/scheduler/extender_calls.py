"""kube-scheduler's side of the extender, played over real HTTP for the scheduler tests:
ExtenderArgs bodies as it sends them (Go field names, the whole Pod, node names only), and
the Pod objects the watch of bound pods delivers after its bind, the kubelet's status and a
refusal. The NodeResourceTopology objects are tests/webhook/placement_model/nrt.py's."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.webhook.placement_model.nrt import nrt
from webhook.scheduler.accounting import Ledger
from webhook.scheduler.nrt_cache import NrtCache
from webhook.scheduler.routes import add_routes

SCHEDULER = "topoplace-numa-scheduler"
# A DGX H100 under single-numa-node, pod scope, static CPU manager (2 CPUs reserved).
DGX = {"policy": "single-numa-node", "scope": "pod", "cpus_per_zone": 112}


def dgx(node: str, free_gpus: Sequence[int], free_cpus: Sequence[int] = (110, 112)) -> Any:
    obj = nrt(node, free_gpus, free_cpus=free_cpus, **DGX)  # type: ignore[arg-type]
    for resource in obj["zones"][0]["resources"]:
        if resource["name"] == "cpu":
            resource["allocatable"] = "110"  # reservedSystemCPUs 0,1: the static CPU manager
    return obj


def pod(name: str, gpus: int, *, cpus: int = 8, uid: str | None = None) -> dict[str, Any]:
    """A Pod as kube-scheduler holds it: admitted by the webhook (Guaranteed), defaulted."""
    limits = {"cpu": str(cpus), "memory": "64Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": uid or f"uid-{name}",
                     "labels": {"topoplace.io/policy": "numa"}},
        "spec": {
            "schedulerName": SCHEDULER,
            "containers": [{"name": "trainer", "image": "x",
                            "resources": {"limits": limits, "requests": dict(limits)}}],
        },
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]},
    }  # fmt: skip


def bound(p: dict[str, Any], node: str) -> dict[str, Any]:
    """The Pod after the binding: what the watch delivers (MODIFIED)."""
    out = copy.deepcopy(p)
    out["spec"]["nodeName"] = node
    out["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    return out


def started(p: dict[str, Any]) -> dict[str, Any]:
    """The kubelet's first status: it admitted the pod."""
    out = copy.deepcopy(p)
    out["status"].update(
        phase="Pending",
        hostIP="127.0.0.1",
        startTime="2026-12-06T08:00:00Z",
        containerStatuses=[{"name": "trainer", "ready": False,
                            "state": {"waiting": {"reason": "ContainerCreating"}}}],
    )  # fmt: skip
    return out


def refused(p: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(p)
    out["status"].update(
        phase="Failed",
        reason="TopologyAffinityError",
        message="Pod was rejected: Resources cannot be allocated with Topology locality",
    )
    return out


def args(p: dict[str, Any], *nodes: str) -> dict[str, Any]:
    return {"Pod": p, "Nodes": None, "NodeNames": list(nodes)}


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Extender:
    http: TestClient[Any, Any]
    nrts: NrtCache
    ledger: Ledger
    clock: Clock
    outcomes: list[str] = field(default_factory=list)

    async def filter(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = await self.http.post("/scheduler/filter", json=body)
        assert answer.status == 200, await answer.text()
        result: dict[str, Any] = await answer.json()
        return result

    async def prioritize(self, body: dict[str, Any]) -> dict[str, int]:
        answer = await self.http.post("/scheduler/prioritize", json=body)
        assert answer.status == 200, await answer.text()
        return {h["Host"]: h["Score"] for h in await answer.json()}

    def free(self, node: str, resource: str = "nvidia.com/gpu") -> tuple[int, ...]:
        zones = self.ledger.zones_of(node)
        assert zones is not None
        return tuple(int(v) for v in zones.free(resource))

    def watch(self, kind: str, obj: dict[str, Any]) -> None:
        self.ledger.pod_event(kind, obj)


@contextlib.asynccontextmanager
async def running_extender(*, hold_s: float = 30.0) -> AsyncIterator[Extender]:
    """The extender's routes on a ledger over a NodeResourceTopology cache, the bound pods'
    first list in, on a real HTTP server."""
    clock = Clock()
    outcomes: list[str] = []
    nrts = NrtCache()
    ledger = Ledger(nrts, clock=clock, on_outcome=outcomes.append, hold_s=hold_s)
    nrts.on_change = ledger.nrt_changed
    ledger.pods_listed([])
    app = web.Application()
    add_routes(app, ledger)
    async with TestClient(TestServer(app)) as http:
        yield Extender(http, nrts, ledger, clock, outcomes)


async def held(ledger: Ledger, count: int) -> None:
    """Until `count` filters wait in the ledger's hold (each loop pass lets them run)."""
    for _ in range(1000):
        if ledger.inflight.holding == count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{ledger.inflight.holding} filters held, expected {count}")
