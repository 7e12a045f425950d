"""Discovery assembled: the sources, listed here explicitly, then the pure derivation steps.

`discover(options)` is what `discover` prints and what `run` publishes. It is synchronous and
cheap (a few thousand small file reads), so the agent calls it on every resync and dataset
event; NVML is initialised once per process by its source.
"""

from __future__ import annotations

import argparse
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
from agent.position.metadata import PROVIDERS, MetadataSource
from agent.sources import cpu, datasets, kubelet, nic, nvml, pci, podresources
from common import cache_layout

__all__ = [
    "Discovery",
    "DiscoveryError",
    "DiscoveryOptions",
    "add_discovery_arguments",
    "discover",
    "options_from_args",
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


def discover(options: DiscoveryOptions) -> Discovery:
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
        datasets=datasets.discover(options.dataset_root).newest,
    )
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


def add_discovery_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags shared by `discover` and `run`."""
    defaults = DiscoveryOptions()
    parser.add_argument(
        "--sysfs-root",
        type=Path,
        default=defaults.sysfs_root,
        metavar="DIR",
        help="where the host's /sys is mounted (default: %(default)s)",
    )
    parser.add_argument(
        "--dataset-root",
        type=Path,
        default=defaults.dataset_root,
        metavar="DIR",
        help="the node's dataset cache root (default: %(default)s)",
    )
    parser.add_argument(
        "--kubelet-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="kubelet config file (YAML or JSON); its resource-manager policies become labels",
    )
    parser.add_argument(
        "--kubelet-config-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="the kubelet's --config-dir: its *.conf drop-ins are merged over the config file",
    )
    parser.add_argument(
        "--no-nvml",
        dest="use_nvml",
        action="store_false",
        help="do not ask NVML for GPU product names (sysfs only)",
    )
    parser.add_argument(
        "--per-device-labels",
        action="store_true",
        help="also publish per-GPU labels (NUMA node, paired NIC, best NIC link)",
    )
    parser.add_argument(
        "--network-metadata",
        choices=sorted(PROVIDERS),
        default=None,
        help="ask this cloud's instance metadata for the node's switch groups "
        "(default: do not ask; docs/network-position.md)",
    )
    parser.add_argument(
        "--network-metadata-endpoint",
        default=None,
        metavar="URL",
        help="the metadata URL to ask instead of the provider's own",
    )
    parser.add_argument(
        "--network-metadata-timeout",
        type=_timeout,
        default=2.0,
        metavar="S",
        help="give up on the metadata server after S seconds, at most 10 (default: %(default)s)",
    )


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 10:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 10 seconds: {text!r}")
    return value


def _metadata_source(args: argparse.Namespace) -> MetadataSource | None:
    provider = getattr(args, "network_metadata", None)
    if provider is None:
        if getattr(args, "network_metadata_endpoint", None):
            raise SystemExit("--network-metadata-endpoint needs --network-metadata PROVIDER")
        return None
    return MetadataSource(
        PROVIDERS[provider],
        endpoint=args.network_metadata_endpoint,
        timeout=args.network_metadata_timeout,
        # `run` re-discovers on every resync and dataset event: one request per resync at most.
        interval=getattr(args, "resync_interval", 0.0),
    )


def options_from_args(args: argparse.Namespace) -> DiscoveryOptions:
    return DiscoveryOptions(
        sysfs_root=args.sysfs_root,
        dataset_root=args.dataset_root,
        kubelet_config=args.kubelet_config,
        kubelet_config_dir=args.kubelet_config_dir,
        use_nvml=args.use_nvml,
        per_device_labels=args.per_device_labels,
        # `run` has it (its audit flags); `discover` asks the kubelet only when given one.
        pod_resources_socket=getattr(args, "pod_resources_socket", None),
        network_metadata=_metadata_source(args),
    )
