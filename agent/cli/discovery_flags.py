"""The discovery flags of `discover`, `run` and `audit`, and the DiscoveryOptions they make.

Discovery itself takes the typed `DiscoveryOptions`; only commands parse flags.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.discovery.discover import DiscoveryOptions
from agent.position.metadata import PROVIDERS, MetadataSource
from common.cli.numbers import positive_number

__all__ = ["add_discovery_arguments", "options_from_args"]


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
        type=positive_number(unit="seconds", at_most=10),
        default=2.0,
        metavar="S",
        help="give up on the metadata server after S seconds, at most 10 (default: %(default)s)",
    )


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
