"""PodResources source: what the kubelet assigned to each running container, over its gRPC API.

The kubelet serves `v1.PodResourcesLister` on a unix socket (default
`/var/lib/kubelet/pod-resources/kubelet.sock`, directory 0750 root, socket made under the
kubelet's umask: only root may connect). `GetAllocatableResources` gives every device each
device plugin offers; `List` gives, per container, the device IDs of each
device-plugin resource with the NUMA nodes the plugin reported, the exclusive CPUs the CPU
manager gave it and the memory blocks the memory manager pinned. Nothing is derived here: the
answer is copied into frozen dataclasses, and every failure is one `PodResourcesError` whose
`kind` says whether the socket is absent, unreachable, refused or the answer malformed.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "DEFAULT_SOCKET",
    "Allocatable",
    "ClaimDevice",
    "ContainerResources",
    "DeviceAssignment",
    "MemoryBlock",
    "PodResources",
    "PodResourcesError",
    "allocatable_devices",
    "allocatable_resources",
    "list_pod_resources",
]

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
# The kubelet's own clients accept answers up to 16 MiB (podresources.DefaultMaxMsgSize).
_MAX_MESSAGE = 16 * 1024 * 1024

ErrorKind = Literal["absent", "refused", "unreachable", "malformed", "unsupported"]


class PodResourcesError(Exception):
    """The PodResources API could not be read; `kind` says why, the message says what to do."""

    def __init__(self, message: str, *, kind: ErrorKind) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class DeviceAssignment:
    resource_name: str  # e.g. nvidia.com/gpu, rdma/ib, openshift.io/mlnx_sriov_rdma
    device_ids: tuple[str, ...]
    numa_nodes: tuple[int, ...]  # as the device plugin reported them; () when it did not


@dataclass(frozen=True, slots=True)
class MemoryBlock:
    memory_type: str  # "memory", "hugepages-1Gi", …
    size: int
    numa_nodes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """A device given through a DRA claim: driver/pool/device name it, CDI names may too."""

    claim: str
    driver: str
    pool: str
    device: str
    cdi_devices: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ContainerResources:
    name: str
    devices: tuple[DeviceAssignment, ...]
    cpu_ids: tuple[int, ...]  # exclusive CPUs (empty: the container runs on the shared pool)
    memory: tuple[MemoryBlock, ...]
    claims: tuple[ClaimDevice, ...] = ()


@dataclass(frozen=True, slots=True)
class PodResources:
    namespace: str
    name: str
    containers: tuple[ContainerResources, ...]
    cpu_ids: tuple[int, ...] = ()  # pod-level exclusive CPUs (pod-level resources), overlap
    memory: tuple[MemoryBlock, ...] = ()


@dataclass(frozen=True, slots=True)
class Allocatable:
    """`GetAllocatableResources` whole: devices, the CPUs the CPU manager may hand out
    (empty under its `none` policy) and the memory manager's blocks (empty unless `Static`)."""

    devices: tuple[DeviceAssignment, ...]
    cpu_ids: tuple[int, ...]
    memory: tuple[MemoryBlock, ...]


def _nodes(topology: Any) -> tuple[int, ...]:
    return tuple(sorted({int(n.ID) for n in topology.nodes})) if topology is not None else ()


def _memory(blocks: Any) -> tuple[MemoryBlock, ...]:
    return tuple(
        MemoryBlock(
            memory_type=m.memory_type,
            size=int(m.size),
            numa_nodes=_nodes(m.topology) if m.HasField("topology") else (),
        )
        for m in blocks
    )


def _device(d: Any) -> DeviceAssignment:
    return DeviceAssignment(
        resource_name=d.resource_name,
        device_ids=tuple(d.device_ids),
        numa_nodes=_nodes(d.topology) if d.HasField("topology") else (),
    )


def _container(c: Any) -> ContainerResources:
    return ContainerResources(
        name=c.name,
        devices=tuple(_device(d) for d in c.devices),
        cpu_ids=tuple(int(cpu) for cpu in c.cpu_ids),
        memory=_memory(c.memory),
        claims=tuple(
            ClaimDevice(
                claim=f"{r.claim_namespace}/{r.claim_name}",
                driver=cr.driver_name,
                pool=cr.pool_name,
                device=cr.device_name,
                cdi_devices=tuple(d.name for d in cr.cdi_devices),
            )
            for r in c.dynamic_resources
            for cr in r.claim_resources
        ),
    )


def from_message(response: Any) -> tuple[PodResources, ...]:
    """A `ListPodResourcesResponse` as dataclasses, in the kubelet's order."""
    return tuple(
        PodResources(
            namespace=p.namespace,
            name=p.name,
            containers=tuple(_container(c) for c in p.containers),
            cpu_ids=tuple(int(cpu) for cpu in p.cpu_ids),
            memory=_memory(p.memory),
        )
        for p in response.pod_resources
    )


def _check_socket(socket: Path) -> None:
    try:
        mode = os.stat(socket).st_mode
    except FileNotFoundError:
        raise PodResourcesError(
            f"no PodResources socket at {socket} (no kubelet on this node, or the directory "
            "is not mounted): pass --pod-resources-socket",
            kind="absent",
        ) from None
    except PermissionError:
        raise PodResourcesError(
            f"PodResources socket {socket}: permission denied (the kubelet makes its directory "
            "and socket root-only: apply manifests/overlays/placement-audit, see docs/audit.md)",
            kind="refused",
        ) from None
    if not stat.S_ISSOCK(mode):
        raise PodResourcesError(f"{socket} is not a unix socket", kind="absent")


def _call(socket: Path, method: str, timeout: float) -> Any:
    """One call on a fresh channel (a kubelet restart replaces the socket)."""
    import grpc

    from agent.sources.podresources_pb import api_pb2, api_pb2_grpc

    _check_socket(socket)
    options = [("grpc.max_receive_message_length", _MAX_MESSAGE)]
    request = {
        "List": api_pb2.ListPodResourcesRequest,
        "GetAllocatableResources": api_pb2.AllocatableResourcesRequest,
    }[method]()
    with grpc.insecure_channel(f"unix://{os.path.abspath(socket)}", options=options) as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        try:
            return getattr(stub, method)(request, timeout=timeout)
        except grpc.RpcError as e:
            raise _rpc_error(socket, e, method) from None


def list_pod_resources(
    socket: Path = DEFAULT_SOCKET, *, timeout: float = 10.0
) -> tuple[PodResources, ...]:
    """What every running container was given (`List`)."""
    return from_message(_call(socket, "List", timeout))


def allocatable_devices(
    socket: Path = DEFAULT_SOCKET, *, timeout: float = 10.0
) -> tuple[DeviceAssignment, ...]:
    """Every device the node's device plugins offer, one entry per resource and NUMA set
    (`GetAllocatableResources`): which devices each resource holds."""
    response = _call(socket, "GetAllocatableResources", timeout)
    return tuple(_device(d) for d in response.devices)


def allocatable_resources(socket: Path = DEFAULT_SOCKET, *, timeout: float = 10.0) -> Allocatable:
    """Everything the kubelet may hand to containers (`GetAllocatableResources`)."""
    response = _call(socket, "GetAllocatableResources", timeout)
    return Allocatable(
        devices=tuple(_device(d) for d in response.devices),
        cpu_ids=tuple(int(cpu) for cpu in response.cpu_ids),
        memory=_memory(response.memory),
    )


def _rpc_error(socket: Path, e: Any, method: str) -> PodResourcesError:
    import grpc

    code, details = e.code(), e.details() or ""
    where = f"PodResources {method} on {socket}"
    if code == grpc.StatusCode.INTERNAL and "deserializ" in details.lower():
        return PodResourcesError(f"{where}: the answer is not a ListPodResourcesResponse "
                                 f"({details})", kind="malformed")  # fmt: skip
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return PodResourcesError(
            f"{where}: the kubelet does not serve v1.PodResourcesLister ({details}); "
            "it needs Kubernetes 1.20 or later",
            kind="unsupported",
        )
    if code == grpc.StatusCode.PERMISSION_DENIED or "permission denied" in details.lower():
        return PodResourcesError(
            f"{where}: permission denied ({details}); the socket is root-only: apply "
            "manifests/overlays/placement-audit, see docs/audit.md",
            kind="refused",
        )
    return PodResourcesError(f"{where}: {code.name}: {details}", kind="unreachable")
