"""The audit's inputs, read once: the topology, every PCI function (virtual functions too: an
SR-IOV plugin hands those out), the device-ID maps and the kubelet's assignments.

The only module of the room that reads; it does so through `sources`, like discovery.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from agent.audit.resolve import DEFAULT_GPU_RESOURCES, Resolver
from agent.audit.verdict import ContainerAudit, audit_pods
from agent.discovery.discover import DiscoveryOptions, read_machine_topology
from agent.discovery.topology import Topology
from agent.sources import device_ids
from agent.sources.podresources import DEFAULT_SOCKET, PodResources, list_pod_resources

__all__ = ["AuditOptions", "Machine", "audit", "list_pods", "read_machine"]


@dataclass(frozen=True, slots=True)
class AuditOptions:
    discovery: DiscoveryOptions
    socket: Path = DEFAULT_SOCKET
    proc_root: Path = Path("/proc")
    gpu_resources: Collection[str] = DEFAULT_GPU_RESOURCES
    timeout: float = 10.0


@dataclass(frozen=True, slots=True)
class Machine:
    topology: Topology
    resolver: Resolver


def read_machine(options: AuditOptions) -> Machine:
    """The hardware side, which changes rarely (the monitor re-reads it on each resync)."""
    # The audit places devices; the dataset cache is no part of that.
    topology, pci_info = read_machine_topology(options.discovery, with_datasets=False)
    ids = device_ids.discover(options.discovery.sysfs_root, options.proc_root)
    resolver = Resolver(topology, pci_info, ids, gpu_resources=options.gpu_resources)
    return Machine(topology=topology, resolver=resolver)


def audit(machine: Machine, pods: tuple[PodResources, ...]) -> tuple[ContainerAudit, ...]:
    return audit_pods(pods, machine.resolver, machine.topology)


def list_pods(options: AuditOptions) -> tuple[PodResources, ...]:
    """PodResourcesError on any failure (absent, refused, unreachable, malformed)."""
    return list_pod_resources(options.socket, timeout=options.timeout)
