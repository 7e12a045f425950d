"""A node's free capacity per NUMA node two ways: as its NodeResourceTopology says, and as its
real kubelet's PodResources says (counted here on its own, not with the agent's code), plus
the agent's NodeResourceTopology writes as the API server's audit log recorded them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.sources.podresources import allocatable_resources, list_pod_resources
from e2e.cluster import Cluster, load
from e2e.controlplane.audit import lines_of, read_writes
from e2e.kube import Kubectl, get_url
from e2e.topoplace.install import pods_of
from tests.e2e.helpers import AGENT_USER
from tests.e2e.kubelet_truth import numa_of_cpus

Free = dict[str, dict[str, int]]  # zone name -> resource -> available
COMPARED = ("cpu", "nvidia.com/gpu", "rdma/ib")


def published(kubectl: Kubectl, node: str) -> Free | None:
    """The NodeResourceTopology's available counts of COMPARED; None while there is none."""
    done = kubectl.run("get", "noderesourcetopology", node, "-o", "json", check=False)
    if done.returncode != 0:
        return None
    obj = json.loads(done.stdout)
    return {
        z["name"]: {r["name"]: int(r["available"]) for r in z["resources"] if r["name"] in COMPARED}
        for z in obj["zones"]
    }


def kubelet_free(cluster: Cluster, node: str) -> Free:
    """Allocatable minus assigned, per NUMA node, from the kubelet's own answers."""
    if node not in cluster.nodes:  # added by `add-node` after the session's record was read
        cluster = load(cluster.state)
    socket = Path(cluster.nodes[node]["pod_resources_socket"])
    offered, pods = allocatable_resources(socket), list_pod_resources(socket)
    free: Free = {}

    def add(numa: int, resource: str, n: int) -> None:
        zone = free.setdefault(f"node-{numa}", {})
        zone[resource] = zone.get(resource, 0) + n

    zone_of: dict[tuple[str, str], int] = {}
    for entry in offered.devices:
        if entry.resource_name in COMPARED and entry.numa_nodes:
            for device in entry.device_ids:
                zone_of[(entry.resource_name, device)] = min(entry.numa_nodes)
                add(min(entry.numa_nodes), entry.resource_name, 1)
    taken = {c for p in pods for ct in p.containers for c in ct.cpu_ids} | {
        c for p in pods for c in p.cpu_ids
    }
    for cpu in set(offered.cpu_ids) - taken:
        (numa,) = numa_of_cpus(cluster, node, (cpu,))
        add(numa, "cpu", 1)
    used = {
        (d.resource_name, device)
        for p in pods
        for ct in p.containers
        for d in ct.devices
        for device in d.device_ids
    }
    for key in used & set(zone_of):
        add(zone_of[key], key[0], -1)
    for numa in {int(z.split("-")[1]) for z in free}:  # a zone with all CPUs taken shows 0
        free[f"node-{numa}"].setdefault("cpu", 0)
    return free


def nrt_writes(cluster: Cluster, node: str) -> list[float]:
    """Unix times of the agent's successful creates and patches of `node`'s object."""
    writes, _ = read_writes(lines_of(Path(cluster.info["audit_log"])))
    return [
        w.time
        for w in writes
        if w.resource == "noderesourcetopologies"
        and w.name == node
        and w.verb in ("create", "patch", "update")
        and w.user == AGENT_USER
        and w.succeeded
    ]


def agent_nrt_writes_metric(kubectl: Kubectl, node: str) -> int:
    """`topoplace_agent_nrt_writes_total` of the agent on `node` (its pod IP, port 9101)."""
    (agent,) = [p for p in pods_of(kubectl, "topoplace-agent") if p["spec"]["nodeName"] == node]
    text = get_url(f"http://{agent['status']['podIP']}:9101/metrics")
    (line,) = [x for x in text.splitlines() if x.startswith("topoplace_agent_nrt_writes_total ")]
    return int(float(line.split()[1]))


def plain_pod(name: str, node: str, *, gpus: int = 0, cpus: int = 1) -> dict[str, Any]:
    """A Guaranteed pod without a policy on `node`: exclusive CPUs (and GPUs) from its kubelet."""
    limits: dict[str, Any] = {"cpu": str(cpus), "memory": "256Mi"}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "nrt-e2e"}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": "registry.k8s.io/pause:3.10",
                 "resources": {"limits": limits}}
            ],
        },
    }  # fmt: skip
