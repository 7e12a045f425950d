"""DGX H100 Nodes as the agent labels them once it has asked the kubelet which NICs each RDMA
resource holds: real discovery on the machine's sysfs tree, with a PodResources server
speaking the real gRPC protocol offering the devices a device plugin would."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from agent.discovery.discover import DiscoveryOptions, discover
from common.vocabulary import TOPOLOGY_ANNOTATION
from tests.agent.audit.kubelet_stub import FakeKubelet, devices, short_socket_dir
from tests.agent.discovery.machines import build

__all__ = ["COMPUTE", "STORAGE", "dgx_h100", "h100_sysfs", "offer"]

# The DGX H100's RDMA functions (tests/agent/discovery/machines.py): GPU partners, the rest.
COMPUTE = ("0000:18:00.0", "0000:40:00.0", "0000:4f:00.0", "0000:5e:00.0",
           "0000:9a:00.0", "0000:c0:00.0", "0000:ce:00.0", "0000:dc:00.0")  # fmt: skip
STORAGE = ("0000:27:00.0", "0000:27:00.1", "0000:a8:00.0", "0000:a8:00.1")
_NUMA1 = ("0000:9a", "0000:a8", "0000:c0", "0000:ce", "0000:dc")

_built: dict[str, Path] = {}


def h100_sysfs() -> Path:
    if "dgx-h100" not in _built:
        _built["dgx-h100"] = build("dgx-h100", Path(tempfile.mkdtemp(prefix="pairs-")) / "sys")
    return _built["dgx-h100"]


def offer(resources: Mapping[str, Sequence[str]]) -> list[Any]:
    """What a device plugin per resource offers: each PCI address on its NUMA node."""
    return [
        devices(name, [pci], [1 if pci.startswith(_NUMA1) else 0])
        for name, ids in resources.items()
        for pci in ids
    ]


def dgx_h100(
    name: str,
    resources: Mapping[str, Sequence[str]] | None,
    *,
    topology_manager: str = "restricted",
    scope: str = "pod",
) -> dict[str, Any]:
    """A labelled DGX H100 Node; `resources` None: the agent could not ask the kubelet."""
    with (
        tempfile.TemporaryDirectory(prefix="pairs-node-") as tmp,
        short_socket_dir(Path(tmp)) as at,
    ):
        config = Path(tmp) / "kubelet.yaml"
        config.write_text(yaml.safe_dump({
            "kind": "KubeletConfiguration", "cpuManagerPolicy": "static",
            "memoryManagerPolicy": "Static", "topologyManagerPolicy": topology_manager,
            "topologyManagerScope": scope,
        }))  # fmt: skip
        options = DiscoveryOptions(sysfs_root=h100_sysfs(), kubelet_config=config, use_nvml=False)
        if resources is None:
            found = discover(options)
        else:
            kubelet = FakeKubelet(at / "kubelet.sock").start()
            try:
                kubelet.offer(*offer(resources))
                found = discover(
                    DiscoveryOptions(**{**_fields(options), "pod_resources_socket": kubelet.socket})
                )
            finally:
                kubelet.stop()
    allocatable = {"cpu": "222", "memory": "1960Gi", "pods": "110", "nvidia.com/gpu": "8"}
    allocatable |= {
        r: str(len(ids)) for r, ids in (resources or {"rdma/ib": COMPUTE + STORAGE}).items()
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **found.labels},
            "annotations": {TOPOLOGY_ANNOTATION: found.annotations[TOPOLOGY_ANNOTATION]},
        },
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


def _fields(options: DiscoveryOptions) -> dict[str, Any]:
    return {f: getattr(options, f) for f in options.__dataclass_fields__}


def annotation(node: Mapping[str, Any]) -> Any:
    return json.loads(node["metadata"]["annotations"][TOPOLOGY_ANNOTATION])
