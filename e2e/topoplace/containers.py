"""Topoplace's containers as the e2e runtime runs them: host processes, each chrooted into
`<node dir>/containers/<container id>/rootfs`. Finding, killing and reading one, and a token
bound to one of its pods, for the scenarios that crash them or act as them."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from e2e.kube import Kubectl, write_kubeconfig
from e2e.topoplace.install import NAMESPACE

__all__ = [
    "container_id",
    "container_pid",
    "kill_container",
    "log_tails",
    "pod_token_kubeconfig",
    "restart_count",
]

TOKEN_SECONDS = 48 * 3600  # outlives any test run


def _status(pod: dict[str, Any], container: str) -> dict[str, Any]:
    status = pod.get("status", {})
    for s in [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]:
        if s["name"] == container:
            return s
    raise LookupError(f"pod {pod['metadata']['name']} has no status for container {container}")


def container_id(pod: dict[str, Any], container: str) -> str:
    """The runtime's ID of the container's current run (without the `runtime://` prefix)."""
    full = _status(pod, container).get("containerID", "")
    return full.split("://", 1)[-1]


def restart_count(pod: dict[str, Any], container: str) -> int:
    return int(_status(pod, container).get("restartCount", 0))


def container_pid(cid: str) -> int | None:
    """The host pid of a running container: the process whose root is its rootfs."""
    suffix = f"/containers/{cid}/rootfs"
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "root").endswith(suffix):
                    return int(entry.name)
            except OSError:  # gone, or not ours to read
                continue
    return None


def kill_container(k: Kubectl, namespace: str, pod: str, container: str) -> int:
    """SIGKILL the container's process, as a crash would; returns its restart count before."""
    obj = k.json("get", "pod", pod, "-n", namespace)
    cid = container_id(obj, container)
    pid = container_pid(cid)
    if pid is None:
        raise LookupError(f"no running process for container {container} of {namespace}/{pod}")
    os.kill(pid, signal.SIGKILL)
    return restart_count(obj, container)


def pod_token_kubeconfig(
    k: Kubectl, *, server: str, ca: Path, sa: str, pod: str, path: Path
) -> Path:
    """A kubeconfig with a TokenRequest token of `sa` bound to `pod`, as the kubelet projects
    it into that pod: for a scenario that acts as the pod."""
    token = k(
        "create",
        "token",
        sa,
        "-n",
        NAMESPACE,
        "--bound-object-kind=Pod",
        f"--bound-object-name={pod}",
        f"--duration={TOKEN_SECONDS}s",
    ).strip()
    return write_kubeconfig(path, server=server, ca=ca, user=f"{sa}@{pod}", token=token)


def log_tails(nodes: dict[str, dict[str, Any]], lines: int = 12) -> list[str]:
    """The last lines of each Topoplace container's latest log file, node by node: what
    `kubectl logs` shows."""
    out = []
    for node, record in nodes.items():
        pods = Path(record["host_root"]) / "var" / "log" / "pods"
        for container_dir in sorted(pods.glob(f"{NAMESPACE}_*/*")):
            runs = sorted(container_dir.glob("*.log"), key=lambda p: int(p.stem))
            if runs:
                text = runs[-1].read_text(errors="replace").splitlines()[-lines:]
                pod = container_dir.parent.name.split("_")[1]
                header = f"--- {node} {pod}/{container_dir.name} (run {runs[-1].stem}) ---"
                out.append("\n".join([header, *text]))
    return out
