"""`topoplace-agent audit`: did placement work? One verdict per running GPU container.

Joins the kubelet's PodResources `List` with this node's topology (docs/audit.md). Exit 0
with the table or JSON; 1 when the PodResources API or the hardware cannot be read.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from common.cli.numbers import positive_number

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Iterable

    from prometheus_client import CollectorRegistry

    from agent.audit.facts import AuditOptions
    from agent.audit.measure import PodRef
    from agent.audit.node_rates import RemoteRates

__all__ = ["add_arguments", "run"]

log = logging.getLogger(__name__)


def _socket_path(text: str) -> Path:
    """A path, or the kubelet's endpoint form `unix:///var/lib/kubelet/pod-resources/…`."""
    for prefix in ("unix://", "unix:"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
            break
    if not text:
        raise argparse.ArgumentTypeError("an empty socket path")
    return Path(text)


def add_pod_resources_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags `audit` and `run` share."""
    from agent.sources.podresources import DEFAULT_SOCKET

    parser.add_argument(
        "--pod-resources-socket",
        type=_socket_path,
        default=DEFAULT_SOCKET,
        metavar="PATH",
        help="the kubelet's PodResources socket (default: %(default)s)",
    )
    parser.add_argument(
        "--proc-root",
        type=Path,
        default=Path("/proc"),
        metavar="DIR",
        help="the host's /proc: driver/nvidia for GPU UUIDs and, where a pod's memory cgroup "
        "is unreadable, its processes' numa_maps (default: %(default)s)",
    )
    parser.add_argument(
        "--locality-threshold",
        type=positive_number(at_most=1),
        default=0.8,
        metavar="SHARE",
        help="a GPU pod with less than this share (0 to 1) of its memory on its GPUs' NUMA "
        "nodes is `remote` (default: %(default)s)",
    )
    parser.add_argument(
        "--no-locality",
        dest="locality",
        action="store_false",
        help="do not measure where GPU pods' memory is (cgroup memory.numa_stat, numa_maps)",
    )
    parser.add_argument(
        "--gpu-resource",
        dest="gpu_resources",
        action="append",
        metavar="NAME",
        help="extended resource whose devices are GPUs (repeatable; default: nvidia.com/gpu)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from agent.cli.discovery_flags import add_discovery_arguments
    from agent.cli.pod_list import add_pod_list_arguments

    add_discovery_arguments(parser)
    add_pod_resources_arguments(parser)
    add_pod_list_arguments(parser)
    parser.add_argument(
        "--output",
        choices=["table", "json"],
        default="table",
        help='table (default), or json: {"containers": [{namespace, pod, container, verdict, '
        "reason, …}], …}",
    )


def audit_options(args: argparse.Namespace) -> AuditOptions:
    from agent.audit.facts import AuditOptions
    from agent.audit.resolve import DEFAULT_GPU_RESOURCES
    from agent.cli.discovery_flags import options_from_args

    return AuditOptions(
        discovery=options_from_args(args),
        socket=args.pod_resources_socket,
        proc_root=args.proc_root,
        gpu_resources=tuple(args.gpu_resources or DEFAULT_GPU_RESOURCES),
    )


def run(args: argparse.Namespace) -> int:
    from agent.audit.facts import audit, list_pods, read_machine
    from agent.audit.probe import LocalityProbe
    from agent.audit.render import as_document, render_table
    from agent.cli.pod_list import PodListError, pod_refs
    from agent.discovery.discover import DiscoveryError
    from agent.sources.podresources import PodResourcesError

    options = audit_options(args)
    try:
        machine = read_machine(options)
        pods = list_pods(options)
    except (DiscoveryError, PodResourcesError) as e:
        log.error("audit failed: %s", e)
        return 1
    try:
        refs = pod_refs(args) if args.locality else []
    except PodListError as e:
        log.warning("memory locality unknown: %s", e)
        refs = []
    audits = audit(machine, pods)
    report = None
    if args.locality:
        probe = LocalityProbe(sysfs_root=options.discovery.sysfs_root, proc_root=args.proc_root,
                              threshold=args.locality_threshold)  # fmt: skip
        report = probe.measure(machine.topology, audits, refs)
    if args.output == "json":
        text = (
            json.dumps(
                as_document(audits, machine.topology, report, threshold=args.locality_threshold),
                indent=2,
            )
            + "\n"
        )
    else:
        text = render_table(audits, report)
    sys.stdout.write(text)
    return 0


def add_monitor_arguments(parser: argparse.ArgumentParser) -> None:
    """`run`'s audit flags: the PodResources ones plus how often to audit."""
    add_pod_resources_arguments(parser)
    parser.add_argument(
        "--audit-interval",
        type=float,
        default=10.0,
        metavar="S",
        help="audit the GPU containers every S seconds, and whenever the kubelet's socket is "
        "recreated (default: %(default)s)",
    )
    parser.add_argument(
        "--no-audit",
        dest="audit",
        action="store_false",
        help="serve no placement-audit metrics (do not read PodResources)",
    )


def start_monitor(
    args: argparse.Namespace,
    registry: CollectorRegistry,
    stop: asyncio.Event,
    *,
    refs: Callable[[], Iterable[PodRef]] = list,
    rates: RemoteRates | None = None,
) -> set[asyncio.Task[None]]:
    """The audit task of `run`, or none with --no-audit. `refs`: the node's pods with their
    UIDs (the pod watch's), `rates`: the NUMA nodes' remote shares, shared with the publisher."""
    import asyncio

    from agent.audit.monitor import AuditMetrics, AuditMonitor
    from agent.audit.probe import LocalityProbe

    if not args.audit:
        return set()
    if args.audit_interval <= 0:
        raise SystemExit(f"--audit-interval must be more than 0 seconds, got {args.audit_interval}")
    options = audit_options(args)
    probe = None
    if args.locality:
        probe = LocalityProbe(
            sysfs_root=options.discovery.sysfs_root,
            proc_root=args.proc_root,
            threshold=args.locality_threshold,
            rates=rates,
        )
    monitor = AuditMonitor(
        options, AuditMetrics(registry), interval=args.audit_interval, probe=probe, refs=refs
    )
    return {asyncio.create_task(monitor.run(stop))}
