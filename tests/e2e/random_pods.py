"""Seeded random pods for the kubelet-truth scenario: plain pods (no policy label, so the
webhook leaves them alone) sized near what one or two NUMA nodes of their machine hold, so
that the real kubelet admits some and refuses others on every machine.

Case `i` of seed `s` is drawn from its own generator (`Random(f"{s}/{i}")`): it is the same
pod on the same node whatever `--cases` says, so one failing case replays alone. Only the
shape of each node (its NodeResourceTopology's allocatable per NUMA node) goes in, never what
is free, so a case does not depend on what ran before it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.kube import qos_class

__all__ = ["GPU", "RDMA", "Case", "NodeShape", "ZoneShape", "draw", "summary"]

GPU, RDMA = "nvidia.com/gpu", "rdma/ib"
GI = 2**30
MAX_CPUS, MAX_MEMORY_GI = 200, 1126  # 1.1 TiB
IMAGE = "registry.k8s.io/pause:3.10"  # not Topoplace's image: the runtime simulates it


@dataclass(frozen=True)
class ZoneShape:
    """What one NUMA node offers pods (allocatable): CPUs, bytes of memory, devices."""

    cpus: int
    memory: int
    gpus: int
    rdma: int


@dataclass(frozen=True)
class NodeShape:
    name: str
    zones: tuple[ZoneShape, ...]

    def widest(self, attr: str) -> int:
        return max((getattr(z, attr) for z in self.zones), default=0)

    def total(self, attr: str) -> int:
        return sum(getattr(z, attr) for z in self.zones)


@dataclass(frozen=True)
class Case:
    index: int
    node: str
    pod: dict[str, Any]  # a Pod without spec.nodeName: the scenario binds it

    @property
    def name(self) -> str:
        return self.pod["metadata"]["name"]


def _near(rng: random.Random, per_zone: int, zones: int) -> int:
    """A count near one or two NUMA nodes' worth (or a small one): where admission turns."""
    roll = rng.random()
    if roll < 0.15 or per_zone < 2:
        return rng.randint(1, max(1, per_zone // 4))
    width = 1 if roll < 0.7 or zones < 2 else 2
    spread = max(2, per_zone // 16)
    return max(1, width * per_zone + rng.randint(-2 * spread, spread))


def _gpus(rng: random.Random, shape: NodeShape) -> int:
    per_zone, total = shape.widest("gpus"), shape.total("gpus")
    if not total or rng.random() < 0.1:
        return 0
    if rng.random() < 0.2:
        return rng.randint(1, 8)
    choices = [1, per_zone - 1, per_zone, per_zone, per_zone + 1, 2 * per_zone, total, total + 1]
    return min(8, max(1, rng.choice(choices)))


def _split(rng: random.Random, amount: int, floor: int) -> tuple[int, int]:
    """`amount` in two parts, the second 10–50 %, neither below `floor`."""
    second = max(floor, round(amount * rng.uniform(0.1, 0.5)))
    return max(floor, amount - second), second


def _resources(
    rng: random.Random, cpu: int, memory_gi: int, devices: Mapping[str, int], *, guaranteed: bool
) -> dict[str, Any]:
    """Guaranteed: requests == limits, integer CPUs. Burstable: requests below the limits, or
    no limit at all. Devices (limits == requests, as they must be) only where asked."""
    wanted = {k: v for k, v in devices.items() if v}
    if guaranteed:
        both = {"cpu": str(cpu), "memory": f"{memory_gi}Gi", **wanted}
        return {"requests": dict(both), "limits": dict(both)}
    cpu_request = str(cpu) if cpu < 2 or rng.random() < 0.7 else f"{cpu * 1000 - 500}m"
    requests = {"cpu": cpu_request, "memory": f"{memory_gi}Gi", **wanted}
    limits = dict(wanted)
    if rng.random() < 0.5:
        limits |= {"cpu": str(cpu * 2), "memory": f"{memory_gi * 2}Gi"}
    return {"requests": requests, "limits": limits} if limits else {"requests": requests}


def _two(
    rng: random.Random,
    kind: str,
    cpus: int,
    memory_gi: int,
    gpus: int,
    rdma: int,
    guaranteed: bool,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The resources of `main` and of the second container (`kind`: app, sidecar, init)."""
    cpu_a, cpu_b = _split(rng, cpus, 1)
    mem_a, mem_b = _split(rng, memory_gi, 1)
    # Devices of an app container are its own; an init container's are handed on to the app
    # containers, and a sidecar's held beside theirs: both worth seeing the kubelet count.
    gpu_a, gpu_b = gpus, 0
    if gpus >= 2 and rng.random() < 0.4:  # split between the two
        gpu_b = rng.randint(1, gpus - 1)
        gpu_a = gpus - gpu_b
    elif kind == "init" and gpus and rng.random() < 0.3:  # handed on to `main`: both ask all
        gpu_b = gpus
    rdma_b = rdma if kind != "app" and rng.random() < 0.5 else 0
    if kind == "init" and rng.random() < 0.4:  # the init container is the pod's peak
        cpu_b, mem_b = cpus + rng.randint(1, 4), memory_gi
    # A Burstable pod keeps a Guaranteed-shaped container now and then: QoS is the pod's, so
    # that container gets no exclusive CPUs either.
    second_guaranteed = guaranteed or rng.random() < 0.3
    main = _resources(rng, cpu_a, mem_a, {GPU: gpu_a, RDMA: rdma - rdma_b}, guaranteed=guaranteed)
    second = _resources(rng, cpu_b, mem_b, {GPU: gpu_b, RDMA: rdma_b}, guaranteed=second_guaranteed)
    return main, second


def draw(seed: int, index: int, shapes: Sequence[NodeShape]) -> Case:
    """Case `index` of `seed`: a node of `shapes` and a pod for it (see the module doc)."""
    rng = random.Random(f"{seed}/{index}")
    shape = rng.choice(sorted(shapes, key=lambda s: s.name))
    zones = len(shape.zones)
    cpus = min(MAX_CPUS, _near(rng, shape.widest("cpus"), zones))
    memory_gi = min(MAX_MEMORY_GI, _near(rng, shape.widest("memory") // GI, zones))
    gpus = _gpus(rng, shape)
    rdma = 0
    if shape.total("rdma") and rng.random() < 0.3:
        rdma = max(1, rng.choice([gpus, 1, shape.widest("rdma"), shape.widest("rdma") + 1]))
    guaranteed = rng.random() < 0.6
    kind = rng.choice(["single"] * 5 + ["app"] * 3 + ["sidecar", "init"])
    main: dict[str, Any] = {"name": "main", "image": IMAGE}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [main],
    }
    if kind == "single":
        main["resources"] = _resources(
            rng, cpus, memory_gi, {GPU: gpus, RDMA: rdma}, guaranteed=guaranteed
        )
    else:
        main["resources"], resources = _two(rng, kind, cpus, memory_gi, gpus, rdma, guaranteed)
        second: dict[str, Any] = {"name": kind, "image": IMAGE, "resources": resources}
        if kind == "app":
            spec["containers"].append(second)
        else:
            if kind == "sidecar":
                second["restartPolicy"] = "Always"
            spec["initContainers"] = [second]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"truth-{index:03d}", "labels": {"app": "kubelet-truth"}},
        "spec": spec,
    }
    return Case(index, shape.name, pod)


def _cores(quantity: str) -> str:
    return f"{int(quantity[:-1]) / 1000:g}" if quantity.endswith("m") else quantity


def _container(c: Mapping[str, Any]) -> str:
    """`main[8c/16 64Gi 4gpu 2ib]`: requests, and the limit where it differs."""
    res = c.get("resources", {})
    req, lim = res.get("requests", {}), res.get("limits", {})
    parts = []
    for name, unit in (("cpu", "c"), ("memory", "")):
        if name in req:
            asked = (_cores(req[name]) if name == "cpu" else req[name]) + unit
            limit = lim.get(name)
            parts.append(asked + (f"/{_cores(limit)}" if limit and limit != req[name] else ""))
    for name, unit in ((GPU, "gpu"), (RDMA, "ib")):
        if lim.get(name):
            parts.append(f"{lim[name]}{unit}")
    return f"{c['name']}[{' '.join(parts)}]"


def summary(pod: Mapping[str, Any]) -> str:
    """`G main[8c 64Gi 4gpu] sidecar[2c 4Gi]`: QoS (G, B), then each container's requests
    (/limit where it differs), init containers first."""
    spec = pod["spec"]
    containers = [*spec.get("initContainers", []), *spec["containers"]]
    return f"{qos_class(dict(pod))[0]} " + " ".join(_container(c) for c in containers)
