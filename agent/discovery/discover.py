"""Discovery assembled: the sources, listed here explicitly, then the pure derivation steps.

`discover(options)` is what `discover` prints and what `run` publishes. It is synchronous and
cheap (a few thousand small file reads), so the agent calls it on every resync and dataset
event; NVML is initialised once per process by its source.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from agent.discovery.labels import derive_labels, topology_annotations
from agent.discovery.rdma_resources import rdma_resources
from agent.discovery.topology import Topology, build_topology
from agent.position.derive import PositionFacts, position_labels
from agent.position.fabric import read_fabric
from agent.position.metadata import MetadataSource
from agent.sources import cpu, datasets, kubelet, nic, nvml, pci, podresources
from common import cache_layout

__all__ = [
    "Discovery",
    "DiscoveryError",
    "DiscoveryOptions",
    "discover",
    "read_machine_topology",
]


log = logging.getLogger(__name__)


class DiscoveryError(Exception):
    """Nothing at all could be read under the sysfs root (wrong --sysfs-root, /sys not mounted)."""


@dataclass(frozen=True, slots=True)
class DiscoveryOptions:
    sysfs_root: Path = Path("/sys")
    dataset_root: Path = cache_layout.DEFAULT_CACHE_ROOT
    kubelet_config: Path | None = None
    use_nvml: bool = True
    per_device_labels: bool = False
    kubelet_config_dir: Path | None = None  # the kubelet's --config-dir (drop-ins)
    # The kubelet's PodResources socket: which NICs each RDMA resource holds.
    pod_resources_socket: Path | None = None
    # The opt-in cloud metadata source (it keeps its answer between resyncs: one request each).
    network_metadata: MetadataSource | None = None


@dataclass(frozen=True, slots=True)
class Discovery:
    labels: Mapping[str, str]  # exactly the owned labels to publish
    annotations: Mapping[str, str]  # {TOPOLOGY_ANNOTATION: compact JSON}
    topology: Topology
    # The node's own view of its network position; the sync loop merges the Node's labels in.
    position: PositionFacts = field(default_factory=PositionFacts)


def read_machine_topology(
    options: DiscoveryOptions, *, with_datasets: bool = True
) -> tuple[Topology, pci.PciInventory]:
    """The machine's topology from the sources, and the PCI inventory it was built from: what
    `discover` labels and what the audit resolves device IDs against. DiscoveryError when the
    sysfs root holds nothing readable."""
    root = options.sysfs_root
    if not os.path.isdir(root):
        raise DiscoveryError(f"sysfs root {root} is not a directory; pass --sysfs-root")
    cpu_info = cpu.discover(root)
    pci_info = pci.discover(root)
    if not cpu_info.online and not pci_info.devices:
        raise DiscoveryError(
            f"no CPUs and no PCI devices readable under {root}: is it a sysfs mount? "
            "(pass --sysfs-root with the host's /sys)"
        )
    topology = build_topology(
        cpu=cpu_info,
        pci=pci_info,
        nics=nic.discover(root),
        nvml=nvml.discover(enabled=options.use_nvml),
        kubelet=kubelet.discover(options.kubelet_config, options.kubelet_config_dir),
        datasets=datasets.discover(options.dataset_root).newest if with_datasets else {},
    )
    return topology, pci_info


def discover(options: DiscoveryOptions) -> Discovery:
    topology, _ = read_machine_topology(options)
    if options.pod_resources_socket is not None:
        topology = replace(
            topology, rdma_resources=_offered(options.pod_resources_socket, topology)
        )
    position = _position(options)
    labels = derive_labels(topology, per_device=options.per_device_labels)
    labels |= position_labels(position, {})[0]  # the Node's own labels are the loop's to add
    return Discovery(
        labels=dict(sorted(labels.items())),
        annotations=topology_annotations(topology),
        topology=topology,
        position=position,
    )


def _position(options: DiscoveryOptions) -> PositionFacts:
    fabric = read_fabric(enabled=options.use_nvml)
    metadata = options.network_metadata.tiers() if options.network_metadata else None
    return PositionFacts(metadata=metadata, nvlink_domain=fabric.domain)


def _offered(socket: Path, topology: Topology) -> dict[str, tuple[str, ...]] | None:
    """What the kubelet's device plugins offer, as RDMA resources; None when unreadable."""
    try:
        offered = podresources.allocatable_devices(socket)
    except podresources.PodResourcesError as exc:
        log.debug("RDMA resources unknown: %s", exc)
        return None
    return rdma_resources(topology, offered)
