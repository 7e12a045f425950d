"""What a node's real kubelet says it gave a pod: PodResources `List` on its socket, its CPU
manager checkpoint, and what `topoplace-agent audit` concludes from them on that node."""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from agent.discovery.discover import DiscoveryOptions, discover
from agent.sources.podresources import PodResources, list_pod_resources
from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from e2e.nodes.manage import audit_argv


def pod_resources(cluster: Cluster, node: str, namespace: str, pod: str) -> PodResources:
    socket = Path(cluster.nodes[node]["pod_resources_socket"])
    found = [p for p in list_pod_resources(socket) if (p.namespace, p.name) == (namespace, pod)]
    assert found, f"{namespace}/{pod} is not in the PodResources List of {node}"
    return found[0]


@cache
def _cpu_numa(sysfs: str) -> dict[int, int]:
    topo = discover(DiscoveryOptions(sysfs_root=Path(sysfs), use_nvml=False)).topology
    return {cpu: n.id for n in topo.numa_nodes for cpu in n.cpus}


def numa_of_cpus(cluster: Cluster, node: str, cpus: tuple[int, ...]) -> set[int]:
    table = _cpu_numa(cluster.nodes[node]["sysfs"])
    return {table[c] for c in cpus}


def cpu_manager_state(cluster: Cluster, node: str) -> dict[str, Any]:
    return json.loads((Path(cluster.nodes[node]["kubelet_root"]) / "cpu_manager_state").read_text())


def audit(cluster: Cluster, node: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    """`topoplace-agent audit --output json` on `node`: (namespace, pod, container) → row."""
    done = subprocess.run(
        audit_argv(cluster.nodes[node], "json"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["containers"]
    return {(r["namespace"], r["pod"], r["container"]): r for r in rows}


def phase(kubectl: Kubectl, namespace: str, pod: str) -> tuple[str, str]:
    """(phase, reason): `Running`, or `Failed` with the kubelet's admission reason."""
    status = kubectl.json("get", "pod", pod, "-n", namespace)["status"]
    return status.get("phase", ""), status.get("reason", "")


def wait_admitted_or_refused(
    kubectl: Kubectl, namespace: str, pod: str, timeout: float = 60
) -> tuple[str, str]:
    """Wait for the kubelet's verdict on a bound pod: Running, or Failed at admission."""
    return procs.wait_for(
        lambda: (p := phase(kubectl, namespace, pod))[0] in ("Running", "Failed") and p,
        f"the kubelet to run or refuse {namespace}/{pod}",
        timeout=timeout,
    )
