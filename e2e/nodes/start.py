"""Start and stop a simulated node: its machine view, its runtime and device plugins, its
kubelet; and wait until the kubelet has registered a Ready Node."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e import procs
from e2e.controlplane.pki import issue_node_client
from e2e.controlplane.start import ControlPlane
from e2e.kube import Kubectl, write_kubeconfig
from e2e.nodes import kubelet
from e2e.nodes.devices import device_plugins
from e2e.nodes.specs import SimulatedNode, memory_kib
from e2e.nodes.view import write_view
from tests.agent.discovery import machines
from webhook.engine.outcome import DEFAULT_PREFETCH_IMAGE as IMAGE

__all__ = ["NodeStarted", "node_host", "node_procs", "start_node", "stop_node", "wait_ready"]

REPO = Path(__file__).resolve().parents[2]
GO_MODULE = REPO / "e2e" / "go" / "kubernetes"


def runtime_binary(bin_dir: Path) -> Path:
    """This checkout's build of e2e-node, keyed by its source as e2e/build-bin.sh keys it:
    the `e2e-node` link names whichever checkout built last."""
    digest = hashlib.sha256((GO_MODULE / "go.mod").read_bytes())
    sources = sorted(
        str(p) for p in (GO_MODULE / "node").rglob("*.go") if not p.name.endswith("_test.go")
    )
    for source in sorted(sources, key=os.fsencode):
        digest.update(Path(source).read_bytes())
    return bin_dir / f"e2e-node-{digest.hexdigest()[:12]}"


# Topoplace's image, which the runtime runs for real: this checkout and its virtualenv on the
# host's system directories, read-only. Every other image stays simulated.
IMAGE_DIRS = ("/bin", "/sbin", "/lib", "/lib64", "/usr", "/etc", sys.base_prefix, str(REPO))
IMAGE_PATH = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"


def node_procs(name: str) -> tuple[str, str, str]:
    """The process names of a node in stopping order: the kubelet, its runtime, and the
    holder of the node's mount namespace."""
    return f"kubelet-{name}", f"runtime-{name}", f"mountns-{name}"


@dataclass(frozen=True)
class NodeStarted:
    record: dict[str, Any]  # what cluster.json keeps about the node
    procs: dict[str, dict[str, Any]]  # name → argv, env, cwd: to start them again


def _pod_ip_prefix(index: int) -> str:
    # 127.0.1.x are node addresses; pods of node i get 127.<base + i // 256>.<i % 256>.x. A
    # second cluster on the same host (its own TOPOPLACE_E2E_STATE) takes another base, so
    # that its pods' listeners never meet the first one's.
    base = int(os.environ.get("TOPOPLACE_E2E_POD_OCTET") or 2)
    if not 2 <= base <= 250:
        raise ValueError(f"TOPOPLACE_E2E_POD_OCTET={base}: must be 2..250 (127.<it>.x.y)")
    return f"127.{base + index // 256}.{index % 256}"


def node_host(host_root: Path, index: int) -> Path:
    """The node's host directory: by index, not name, so that the unix socket paths below it
    stay under 108 bytes."""
    return host_root / f"n{index}"


def _node_kubeconfig(cp: ControlPlane, name: str) -> Path:
    """The kubelet's and the runtime's kubeconfig, as system:node:<name>."""
    cert, key = issue_node_client(cp.pki, name)
    return write_kubeconfig(
        cp.state / "kubeconfigs" / f"node-{name}.kubeconfig",
        server=cp.server,
        ca=cp.pki.ca,
        user=f"system:node:{name}",
        cert=cert,
        key=key,
    )


def _write_kubelet_config(
    cp: ControlPlane, node: SimulatedNode, paths: kubelet.KubeletPaths
) -> tuple[int, int]:
    """The kubelet's config file and drop-ins, on two free ports: (port, healthz port)."""
    kubelet_port, healthz_port = procs.free_port(), procs.free_port()
    doc = kubelet.config(
        ca=cp.pki.ca,
        cri_socket=paths.cri_socket,
        port=kubelet_port,
        healthz_port=healthz_port,
        fields=node.kubelet,
    )
    kubelet.write_config(paths, doc, node.dropins)
    return kubelet_port, healthz_port


def _start_namespace(
    cp: ControlPlane, node: str, proc: str, argv: list[str], *, ready: Path, cwd: Path
) -> int:
    """The node's mount namespace holder; its pid once it has written `ready`."""
    pid = procs.start(cp.state, proc, argv, cwd=cwd)
    procs.wait_for(
        ready.exists,
        f"the mount namespace of {node}",
        timeout=30,
        watch=lambda: procs.check_alive(cp.state, proc),
    )
    return pid


def _runtime_argv(
    cp: ControlPlane,
    name: str,
    index: int,
    paths: kubelet.KubeletPaths,
    *,
    kubeconfig: Path,
    devices: Path,
    sysfs: Path,
) -> list[str]:
    """The node runtime's command line."""
    namespace_name = node_procs(name)[2]
    return [
        str(runtime_binary(cp.bin)),
        f"--node-name={name}",
        f"--cri-socket={paths.cri_socket}",
        f"--pod-ip-prefix={_pod_ip_prefix(index)}",
        f"--kubeconfig={kubeconfig}",
        f"--devices={devices}",
        f"--device-plugin-dir={paths.device_plugins}",
        f"--exec-image={IMAGE}",
        *(f"--exec-image-dir={d}" for d in IMAGE_DIRS if Path(d).exists()),
        f"--exec-path={IMAGE_PATH}",
        f"--exec-state={paths.host / 'containers'}",
        f"--kubernetes-service={cp.server.removeprefix('https://')}",
        # Containers start in the node's mount namespace, where the kubelet mounts volumes.
        f"--mount-namespace-pid-file={procs.pid_file(cp.state, namespace_name)}",
        # Where the runtime finds the kubelet's /var/lib and /var/log (container logs).
        f"--host-path=/var/lib={paths.var_lib}",
        f"--host-path=/var/log={paths.var_log}",
        # A hostPath of /sys is the machine's: its whole sysfs tree, as the agent reads it.
        f"--volume-path=/sys={sysfs}",
        # The pod network's egress proxy and the cluster's object store.
        *(f"--env={k}={v}" for k, v in sorted(cp.pod_env.items())),
    ]


def start_node(
    cp: ControlPlane,
    node: SimulatedNode,
    *,
    index: int,
    host_root: Path,
    sysfs: Path | None = None,
) -> NodeStarted:
    """Lay out the node and start its runtime and kubelet; returns before it is Ready.

    `sysfs`: a tree to use as it is (add-node); otherwise the node's fixture is built.
    """
    node_dir = cp.state / "nodes" / node.name
    if sysfs is None:
        sysfs = machines.build(node.machine, node_dir / "sys")
    paths = kubelet.KubeletPaths(node_host(host_root, index))
    # The view first: a tree without CPU topology fails here, before anything runs.
    view = write_view(sysfs, memory_kib(node.memory), paths.host / "machine")
    datasets = node_dir / "datasets"
    datasets.mkdir(parents=True, exist_ok=True)

    kubeconfig = _node_kubeconfig(cp, node.name)
    kubelet_port, healthz_port = _write_kubelet_config(cp, node, paths)
    plugins = device_plugins(sysfs)
    devices = paths.host / "devices.json"
    devices.write_text(json.dumps(plugins, indent=2) + "\n")
    paths.device_plugins.mkdir(parents=True, exist_ok=True)

    kubelet_name, runtime_name, namespace_name = node_procs(node.name)
    # The node's mount namespace first: the kubelet and the containers live in it.
    ready = paths.host / "mount-namespace.ready"
    ns_argv = kubelet.namespace_command(paths, view, datasets, ready=ready)
    ns_pid = _start_namespace(cp, node.name, namespace_name, ns_argv, ready=ready, cwd=paths.host)
    runtime_argv = _runtime_argv(
        cp, node.name, index, paths, kubeconfig=kubeconfig, devices=devices, sysfs=sysfs
    )
    procs.start(cp.state, runtime_name, runtime_argv, cwd=paths.host)
    procs.wait_for(
        lambda: paths.cri_socket.is_socket(),
        f"the container runtime of {node.name} on {paths.cri_socket}",
        timeout=30,
        watch=lambda: procs.check_alive(cp.state, runtime_name),
    )
    argv = kubelet.command(
        cp.bin / "kubelet",
        ns_pid,
        node=node.name,
        kubeconfig=kubeconfig,
        node_ip=f"127.0.1.{1 + index % 250}",
        labels={"node.kubernetes.io/instance-type": node.machine},
    )
    # Its own directory as cwd: nothing a kubelet does relative to it lands in the repo. The
    # `mount` it runs for tmpfs volumes records them in libmount's utab, by default under the
    # host's /run/mount: the node's own file instead.
    env = {"LIBMOUNT_UTAB": str(paths.host / "utab")}
    procs.start(cp.state, kubelet_name, argv, env=env, cwd=paths.host)
    started = {
        namespace_name: {"argv": ns_argv, "env": {}, "cwd": str(paths.host)},
        runtime_name: {"argv": runtime_argv, "env": {}, "cwd": str(paths.host)},
        kubelet_name: {"argv": argv, "env": env, "cwd": str(paths.host)},
    }
    record = {
        "machine": node.machine,
        "memory": f"{view.memory_kib}Ki",
        "sysfs": str(sysfs),
        "datasets": str(datasets),
        "host_root": str(paths.host),
        "kubelet_root": str(paths.root),
        "kubelet_config": str(paths.config),
        "kubelet_config_dir": str(paths.config_dir),
        "pod_resources_socket": str(paths.pod_resources_socket),
        "kubelet_port": kubelet_port,
        "kubelet_healthz_port": healthz_port,
        "cpus": view.cpus,
        "numa_nodes": list(view.numa_nodes),
        "devices": {r["resource"]: len(r["devices"]) for r in plugins["resources"]},
        "index": index,
    }
    return NodeStarted(record, started)


def _ready(k: Kubectl, name: str, devices: dict[str, int]) -> bool:
    """Ready, and every device plugin registered: capacity counts all its devices."""
    got = k.run("get", "node", name, "-o", "json", check=False)
    if got.returncode != 0:
        return False
    status = json.loads(got.stdout)["status"]
    capacity = status.get("capacity", {})
    if any(capacity.get(r) != str(n) for r, n in devices.items()):
        return False
    conditions = status.get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def wait_ready(
    cp: ControlPlane, k: Kubectl, name: str, devices: dict[str, int], *, timeout: float = 90
) -> None:
    kubelet_name, runtime_name, _ = node_procs(name)

    def alive() -> None:
        procs.check_alive(cp.state, runtime_name)
        procs.check_alive(cp.state, kubelet_name)

    procs.wait_for(
        lambda: _ready(k, name, devices),
        f"Node {name} Ready with its devices (registered by its kubelet and device plugins)",
        timeout=timeout,
        watch=alive,
    )
    set_address(k, name)


def set_address(k: Kubectl, name: str) -> None:
    """What a cloud controller manager does: give the Node its address, here 127.0.0.1, so
    the API server reaches its kubelet (`kubectl logs`) at the port the kubelet publishes.
    The kubelet refuses a loopback --node-ip and so leaves the addresses alone."""
    status = {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}}
    k("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status))


def stop_node(state: Path, name: str, host: Path | None) -> None:
    """Stop the node's kubelet, then its runtime; remove its directories."""
    for proc in node_procs(name):
        procs.stop(state, proc)
    if host is not None:
        shutil.rmtree(host, ignore_errors=True)
    shutil.rmtree(state / "nodes" / name, ignore_errors=True)
