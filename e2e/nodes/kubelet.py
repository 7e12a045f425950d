"""One real kubelet per simulated node: its config file and drop-ins, and the command line
that starts it in a private mount namespace where the machine is the simulated one.

A kubelet writes host paths whatever `--root-dir` says: the device-plugin directory is the
constant /var/lib/kubelet/device-plugins, it creates /var/log/pods and /var/log/containers,
and every `DirectoryOrCreate` hostPath of a pod it runs (the agent's /var/lib/topoplace/…).
So in its namespace /var/lib and /var/log are the node's own directories, and it runs as a
kubeadm kubelet would (root dir /var/lib/kubelet, config /var/lib/kubelet/config.yaml). The
namespace dies with the kubelet, taking every mount with it.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.nodes.view import MachineView

__all__ = ["KubeletPaths", "command", "config", "namespace_command", "write_config"]

# Where the kubelet sees things inside its namespace (kubeadm's layout).
ROOT = Path("/var/lib/kubelet")
CONFIG = ROOT / "config.yaml"
CONFIG_DIR = ROOT / "config.d"
DATASETS = Path("/var/lib/topoplace/datasets")


@dataclass(frozen=True)
class KubeletPaths:
    """A node's host directory, and where each kubelet path lands in it."""

    host: Path  # bind-mounted pieces live here: var/lib, var/log, the machine view

    @property
    def var_lib(self) -> Path:
        return self.host / "var" / "lib"

    @property
    def var_log(self) -> Path:
        return self.host / "var" / "log"

    def on_host(self, inside: Path) -> Path:
        """The host path of a path the kubelet sees under /var/lib or /var/log."""
        rel = inside.relative_to("/var")
        return self.host / "var" / rel

    @property
    def root(self) -> Path:
        return self.on_host(ROOT)

    @property
    def config(self) -> Path:
        return self.on_host(CONFIG)

    @property
    def config_dir(self) -> Path:
        return self.on_host(CONFIG_DIR)

    @property
    def pod_resources_socket(self) -> Path:
        return self.root / "pod-resources" / "kubelet.sock"

    @property
    def device_plugins(self) -> Path:
        return self.root / "device-plugins"

    @property
    def cri_socket(self) -> Path:
        return self.host / "cri.sock"


def config(
    *, ca: Path, cri_socket: Path, port: int, healthz_port: int, fields: dict[str, Any]
) -> dict[str, Any]:
    """The e2e defaults, with `fields` (the node's own KubeletConfiguration) merged over."""
    doc: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # Serving, on loopback only; the API server's client certificate is the only caller.
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{cri_socket}",
        # These hosts have cgroup v1 and swap may be on; pods are processes of no one's, so
        # no QoS cgroups and no node-allocatable enforcement.
        "failCgroupV1": False,
        "failSwapOn": False,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": ["none"],
        "evictionHard": {},
        # 4Gi kept for the system, as reserved memory on NUMA node 0: the Static memory
        # manager needs the two to agree.
        "systemReserved": {"memory": "4Gi"},
        "reservedMemory": [{"numaNode": 0, "limits": {"memory": "4Gi"}}],
        "volumePluginDir": str(ROOT / "volume-plugins"),  # default is under /usr/libexec
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "10s",
        "nodeStatusReportFrequency": "1m",
        "syncFrequency": "10s",
        "fileCheckFrequency": "20s",
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
    }
    return {**doc, **fields}


def write_config(paths: KubeletPaths, doc: dict[str, Any], dropins: dict[str, Any]) -> None:
    paths.config.parent.mkdir(parents=True, exist_ok=True)
    paths.config.write_text(json.dumps(doc, indent=2) + "\n")  # JSON is YAML
    paths.config_dir.mkdir(parents=True, exist_ok=True)
    for name, fields in dropins.items():
        dropin = {"apiVersion": doc["apiVersion"], "kind": doc["kind"], **fields}
        (paths.config_dir / name).write_text(json.dumps(dropin, indent=2) + "\n")


def namespace_command(
    paths: KubeletPaths, view: MachineView, datasets: Path, *, ready: Path
) -> list[str]:
    """The node's mount namespace, held by a process of its own: `unshare` a private one, bind
    the machine and the node's /var over the host's, write `ready`, then wait. The kubelet
    enters it, and so do the containers the runtime runs, so the volumes the kubelet mounts
    (the tmpfs of a token, of a Memory emptyDir) outlive a kubelet restart, as on a host."""
    binds = [
        (paths.var_lib, Path("/var/lib")),
        (paths.var_log, Path("/var/log")),
        (datasets, DATASETS),
        (view.system, Path("/sys/devices/system")),
        (view.cpuinfo, Path("/proc/cpuinfo")),
        (view.meminfo, Path("/proc/meminfo")),
    ]
    for directory in (paths.var_lib, paths.var_log, paths.on_host(DATASETS)):
        directory.mkdir(parents=True, exist_ok=True)
    # -n: no entry in /run/mount/utab, which is the host's /run
    script = "set -e\n"
    script += "".join(
        f"mount -n --bind {shlex.quote(str(a))} {shlex.quote(str(b))}\n" for a, b in binds
    )
    script += f": > {shlex.quote(str(ready))}\nexec sleep infinity\n"
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script]


def command(
    kubelet: Path,
    namespace_pid: int,
    *,
    node: str,
    kubeconfig: Path,
    node_ip: str,
    labels: dict[str, str],
) -> list[str]:
    """The kubelet, in the node's mount namespace (held by `namespace_pid`)."""
    argv = [
        str(kubelet),
        f"--config={CONFIG}",
        f"--config-dir={CONFIG_DIR}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={ROOT}",
        f"--cert-dir={ROOT / 'pki'}",
        f"--hostname-override={node}",
        # A loopback node IP is refused ("nodeIP can't be loopback address", logged on each
        # status update) and the Node gets no address from the kubelet; without it the kubelet
        # would publish this host's own interface address, which nothing here may dial.
        f"--node-ip={node_ip}",
        f"--node-labels={','.join(f'{k}={v}' for k, v in sorted(labels.items()))}",
        "--v=2",
    ]
    return ["nsenter", f"--mount=/proc/{namespace_pid}/ns/mnt", "--", *argv]
