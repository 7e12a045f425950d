"""All the simulated machines of `make cluster` at once: started together, waited for
together; what their kubelets weigh; and the host paths a kubelet may write whatever
--root-dir says, which `make cluster-down` checks were left alone."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e.controlplane.start import ControlPlane
from e2e.kube import Kubectl
from e2e.nodes import specs
from e2e.nodes.start import start_node, wait_ready

__all__ = ["HOST_PATHS", "host_paths", "rss_mib", "start_nodes"]


def start_nodes(
    cp: ControlPlane, k: Kubectl, host_root: Path, say: Callable[[str], None]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every simulated node's runtime and kubelet, started together, then waited for.
    Returns the nodes' records and their processes."""
    out: dict[str, Any] = {}
    started_procs: dict[str, Any] = {}
    for index, node in enumerate(specs.NODES):
        started = start_node(cp, node, index=index, host_root=host_root)
        out[node.name] = started.record
        started_procs |= started.procs
    for name in out:
        wait_ready(cp, k, name, out[name]["devices"])
        say(f"node {name} Ready: its kubelet registered it ({_capacity(k, name)})")
    return out, started_procs


def _capacity(k: Kubectl, name: str) -> str:
    cap = k.json("get", "node", name)["status"]["capacity"]
    parts = [f"{cap.get('cpu')} cpu", f"memory {cap.get('memory')}"]
    parts += [f"{r} {cap[r]}" for r in ("nvidia.com/gpu", "rdma/ib") if r in cap]
    return ", ".join(parts)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# Host paths a kubelet writes whatever --root-dir says (and libmount's utab): confined to each
# node's mount namespace, so `down` checks that none appeared on the host.
HOST_PATHS = (
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/topoplace",
    "/usr/libexec/kubernetes",
    "/etc/kubernetes",
    "/run/mount",
    "/var/run/kubernetes",
)


def host_paths() -> list[str]:
    return [p for p in HOST_PATHS if os.path.lexists(p)]
