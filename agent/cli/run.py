"""`topoplace-agent run`: keep this node's owned labels and topology annotation in sync.

The DaemonSet's command. Wires the pieces together: kubeconfig/in-cluster client, the sync
loop, the dataset cache watcher and the health/metrics server. SIGTERM or SIGINT stops it
cleanly with exit status 0.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from common.cli.cluster_flags import add_kubeconfig_argument, add_node_name_argument
from common.cli.numbers import positive_number

if TYPE_CHECKING:
    import asyncio

    from agent.discovery.discover import DiscoveryOptions
    from agent.sync.health.server import AgentMetrics
    from agent.sync.labels.loop import SyncLoop

__all__ = ["add_arguments", "run"]

log = logging.getLogger(__name__)

# Seconds to let the loop and the cache watcher finish after SIGTERM (well inside the
# kubelet's default 30 s grace period).
_SHUTDOWN_GRACE = 5.0


def _pod_counts(metrics: AgentMetrics, index: Any = None) -> Callable[[Mapping[str, Any]], None]:
    """What the pod watch feeds every pod it sees: the kubelet refusals, the prefetches and
    the pods' UIDs for the locality audit."""
    from agent.sync.pod_events.prefetches import PrefetchCounts
    from agent.sync.pod_events.refusals import KubeletRefusals

    refusals = KubeletRefusals(metrics.registry)
    prefetches = PrefetchCounts(metrics.registry)

    def observe(pod: Mapping[str, Any]) -> None:
        refusals.observe(pod)
        prefetches.observe(pod)
        if index is not None:
            index.observe(pod)

    return observe


def _locality_state(args: argparse.Namespace) -> tuple[Any, Any]:
    """(RemoteRates, PodIndex): the NUMA nodes' remote shares (the audit's metrics and the
    NodeResourceTopology's zone attribute share one) and the pods' UIDs; None where off."""
    from agent.audit.measure import PodIndex
    from agent.audit.node_rates import RemoteRates

    measuring = args.audit and args.locality
    rates = RemoteRates() if measuring or args.node_resource_topology else None
    return rates, PodIndex() if measuring else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from agent.cli.discovery_flags import add_discovery_arguments

    add_node_name_argument(parser, purpose="label")
    add_discovery_arguments(parser)
    parser.add_argument(
        "--resync-interval",
        type=positive_number(unit="seconds"),
        default=60.0,
        metavar="S",
        help="re-discover and repair labels every S seconds (default: %(default)s)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=9101,
        metavar="PORT",
        help="port for /healthz, /readyz and /metrics; 0 picks a free one (default: %(default)s)",
    )
    parser.add_argument(
        "--metrics-host", default="0.0.0.0", metavar="ADDR", help="(default: %(default)s)"
    )
    parser.add_argument(
        "--dataset-host-root",
        type=PurePosixPath,
        default=None,
        metavar="DIR",
        help="the cache root as pods mount it (their hostPath), where the agent sees it "
        "elsewhere (default: --dataset-root)",
    )
    parser.add_argument(
        "--no-dataset-leases",
        dest="dataset_leases",
        action="store_false",
        help="do not watch this node's pods to lease the dataset versions they mount "
        "(needs pods list/watch; without it only a prefetch's own lease keeps a version)",
    )
    parser.add_argument(
        "--no-node-resource-topology",
        dest="node_resource_topology",
        action="store_false",
        help="do not publish this node's free capacity per NUMA node as a "
        "NodeResourceTopology (needs the CRD and the PodResources socket; docs/numa-capacity.md)",
    )
    add_kubeconfig_argument(parser)
    from agent.cli.audit import add_monitor_arguments

    add_monitor_arguments(parser)  # the placement audit's series on /metrics


async def _serve(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from agent.cli.discovery_flags import options_from_args
    from agent.sync.health.server import AgentMetrics, HealthServer
    from agent.sync.labels.node_client import connect

    options = options_from_args(args)
    metrics = AgentMetrics()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async with (
        connect(kubeconfig=args.kubeconfig, on_call=metrics.record) as nodes,
        HealthServer(metrics, host=args.metrics_host, port=args.metrics_port),
    ):
        sync = _sync_loop(args, options, nodes, metrics)
        helpers = _start_helpers(args, options, nodes, metrics, sync.poke, stop)
        log.info(
            "keeping node labels in sync",
            extra={"node": args.node_name, "resync_interval": args.resync_interval},
        )
        syncing = asyncio.create_task(sync.run(stop))
        await asyncio.wait(
            {syncing, asyncio.create_task(stop.wait())}, return_when=asyncio.FIRST_COMPLETED
        )
        stop.set()
        if not await _wind_down({syncing, *helpers}):
            return 1
    log.info("stopped", extra={"node": args.node_name})
    return 0


def _sync_loop(
    args: argparse.Namespace, options: DiscoveryOptions, nodes: Any, metrics: AgentMetrics
) -> SyncLoop:
    """The label sync loop, its events logged and counted."""
    from functools import partial

    from agent.discovery.discover import discover
    from agent.sync.labels.loop import SyncEvent, SyncLoop, log_event

    def emit(event: SyncEvent) -> None:
        log_event(event)
        metrics.record(event)

    return SyncLoop(
        nodes,
        partial(discover, options),
        node_name=args.node_name,
        resync_interval=args.resync_interval,
        emit=emit,
    )


def _start_helpers(
    args: argparse.Namespace,
    options: DiscoveryOptions,
    nodes: Any,
    metrics: AgentMetrics,
    poke: Callable[[str], None],
    stop: asyncio.Event,
) -> set[asyncio.Task[Any]]:
    """Everything that runs beside the sync loop until `stop`: the cache watcher, the
    NodeResourceTopology publisher, the pod watch (leases, counts) and the placement audit."""
    import asyncio

    from agent.cli.audit import start_monitor
    from agent.sync.labels.cache_watch import watch_cache

    tasks = {asyncio.create_task(watch_cache(options.dataset_root, poke, stop=stop))}
    rates, index = _locality_state(args)
    publisher = _publisher(args, nodes.api, metrics, rates)
    if publisher is not None:
        tasks.add(asyncio.create_task(publisher.run(stop)))
    if args.dataset_leases or publisher is not None or index is not None:
        from agent.sync.leases.pod_watch import PodLeases

        # One watch of this node's pods serves both the leases and the publisher.
        keeper = PodLeases(
            nodes.api,
            node_name=args.node_name,
            cache_root=options.dataset_root,
            host_root=args.dataset_host_root,
            on_event=publisher.poke if publisher is not None else lambda: None,
            on_pod=_pod_counts(metrics, index),
            lease=args.dataset_leases,
        )
        tasks.add(asyncio.create_task(keeper.run(stop)))
    tasks.update(
        start_monitor(  # empty with --no-audit
            args,
            metrics.registry,
            stop,
            refs=index.refs if index is not None else list,
            rates=rates,
        )
    )
    return tasks


async def _wind_down(tasks: set[asyncio.Task[Any]]) -> bool:
    """Let `tasks` finish within the grace period, cancel the rest; False when one failed."""
    import asyncio

    # A request in flight may take its full timeout; do not outstay the grace period.
    done, pending = await asyncio.wait(tasks, timeout=_SHUTDOWN_GRACE)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        if task.exception() is not None:
            log.error("stopped by an unexpected error", exc_info=task.exception())
            return False
    return True


def _publisher(args: argparse.Namespace, api: Any, metrics: AgentMetrics, rates: Any) -> Any:
    """The NodeResourceTopology publisher, or None when turned off."""
    if not args.node_resource_topology:
        return None
    from functools import partial

    from agent.nrt.client import TopologyApi
    from agent.nrt.publisher import Publisher
    from agent.nrt.snapshot import NodeSources, read_body

    sources = NodeSources(
        sysfs_root=args.sysfs_root,
        pod_resources_socket=args.pod_resources_socket,
        kubelet_config=args.kubelet_config,
        kubelet_config_dir=args.kubelet_config_dir,
        rates=rates,
    )
    return Publisher(
        TopologyApi(api),
        partial(read_body, sources),
        node_name=args.node_name,
        on_write=metrics.nrt_writes.inc,
        on_current=metrics.track_node_resource_topology(),
        recheck=args.resync_interval,
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    from common.kube_config import ConfigError

    try:
        return asyncio.run(_serve(args))
    except ConfigError as exc:
        log.error("%s", exc)
        return 1
    except OSError as exc:
        # Almost always the metrics port: already taken or not allowed.
        log.error(
            "cannot start: %s (is --metrics-port %d in use? pick another or 0)",
            exc,
            args.metrics_port,
        )
        return 1
