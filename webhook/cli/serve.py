"""`topoplace-webhook serve`: the HTTPS admission server (AdmissionReview v1 on POST /mutate).

Prints two kinds of lines on stdout for scripts (logs go to stderr):
`ca: PATH` (with --self-signed) and `listening: URL` once the port is bound (the real port
when --port 0), then `metrics: URL` when metrics are on. SIGTERM/SIGINT stop it gracefully:
new connections are refused, in-flight requests finish, exit status 0.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

from webhook.cli.engine_flags import add_engine_arguments, settings_from_args
from webhook.engine.outcome import EngineSettings

__all__ = ["add_arguments", "run"]

logger = logging.getLogger(__name__)

_EXIT_POLICIES = 1
_EXIT_STARTUP = 1
_EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags in --help's order: what to serve, where, the engine's settings, reloading and
    limits, the cluster watches, shutdown."""
    _serving_arguments(parser)
    _listening_arguments(parser)
    add_engine_arguments(parser)
    _reload_arguments(parser)
    _watch_arguments(parser)
    parser.add_argument(
        "--shutdown-timeout",
        type=float,
        default=20.0,
        metavar="S",
        help="on SIGTERM, how long in-flight requests may take to finish (default 20)",
    )


def _serving_arguments(parser: argparse.ArgumentParser) -> None:
    """The policies and the TLS key pair (or a throwaway one)."""
    parser.add_argument(
        "--policies", type=Path, required=True, metavar="DIR", help="directory of *.yaml policies"
    )
    parser.add_argument("--tls-cert", type=Path, metavar="FILE", help="PEM certificate chain")
    parser.add_argument("--tls-key", type=Path, metavar="FILE", help="PEM private key")
    parser.add_argument(
        "--self-signed",
        action="store_true",
        help="local use: make a throwaway CA + serving cert for localhost/127.0.0.1",
    )
    parser.add_argument(
        "--self-signed-dir",
        type=Path,
        metavar="DIR",
        help="where --self-signed writes ca.crt, tls.crt, tls.key (default: a temporary dir)",
    )


def _listening_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        metavar="ADDR",
        help="listen address of HTTPS and metrics (default 0.0.0.0; 127.0.0.1 with --self-signed)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=8443,
        metavar="PORT",
        help="HTTPS port (default 8443; 0: a free one)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=9102,
        metavar="PORT",
        help="plain-HTTP Prometheus port (0: a free one, -1: off; default 9102)",
    )


def _reload_arguments(parser: argparse.ArgumentParser) -> None:
    """The request bound and how often the key pair and the policies are looked at again."""
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=4 * 1024 * 1024,
        metavar="N",
        help="larger request bodies get HTTP 400 (default 4 MiB)",
    )
    parser.add_argument(
        "--tls-reload-interval",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds between checks of the key pair files (default 10)",
    )
    parser.add_argument(
        "--policy-poll-interval",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds between policy directory checks besides file events (default 10)",
    )


def _watch_arguments(parser: argparse.ArgumentParser) -> None:
    """The optional watches of the cluster, each with the RBAC it needs."""
    parser.add_argument(
        "--node-cache",
        action="store_true",
        help="watch every node (RBAC: nodes list, watch) and warn at admission when a mutated "
        "pod fits no node; never denies, silent until the first node list is in. Also looks at "
        "the Workload API and its gates every minute (RBAC: get /metrics): keepTogether goes "
        "through PodGroups where the cluster keeps gangs together itself",
    )
    parser.add_argument(
        "--workload-spans",
        action="store_true",
        help="with --node-cache: watch the placed pods that opted in (RBAC: pods list, watch) "
        "and export, per running workload, the domains its pods span and the most hops "
        "between two of them (topoplace_webhook_workload_*)",
    )
    parser.add_argument(
        "--claim-template-cache",
        action="store_true",
        help="watch Topoplace's DRA ResourceClaimTemplates (RBAC: resourceclaimtemplates list, "
        "watch): a DRA pod whose template is not there yet takes the device-plugin path "
        "with a warning; without it the webhook trusts that every template exists",
    )
    parser.add_argument(
        "--numa-scheduling",
        action="store_true",
        help="watch NodeResourceTopology objects (RBAC: noderesourcetopologies list, watch; "
        "leases get in kube-system): serve the scheduler extender on /scheduler/filter and "
        "/scheduler/prioritize, say at admission what no NUMA node has free and when a "
        "policy's numaAwareScheduler is not running",
    )
    parser.add_argument(
        "--no-scheduler-accounting",
        dest="scheduler_accounting",
        action="store_false",
        help="with --numa-scheduling: judge NUMA nodes on the NodeResourceTopology alone, not "
        "counting the pods bound but not shown in it yet (to measure what the count saves: "
        "the pods of a burst are then bound and refused by their kubelets)",
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="FILE",
        help="for --node-cache, --claim-template-cache and --numa-scheduling outside a pod "
        "(default: in-cluster, else $KUBECONFIG)",
    )


def _usage_problem(args: argparse.Namespace) -> str | None:
    has_pair = args.tls_cert is not None or args.tls_key is not None
    if args.self_signed and has_pair:
        return "give either --tls-cert/--tls-key or --self-signed, not both"
    if not args.self_signed and (args.tls_cert is None or args.tls_key is None):
        return "serving needs TLS: give --tls-cert FILE and --tls-key FILE, or --self-signed"
    if args.self_signed_dir is not None and not args.self_signed:
        return "--self-signed-dir only makes sense with --self-signed"
    if args.kubeconfig is not None and not (
        args.node_cache or args.claim_template_cache or args.numa_scheduling
    ):
        return (
            "--kubeconfig only makes sense with --node-cache, --claim-template-cache or "
            "--numa-scheduling"
        )
    if args.workload_spans and not args.node_cache:
        return "--workload-spans needs --node-cache (the spans are counted on the nodes' labels)"
    for flag, value in (("--port", args.port), ("--metrics-port", args.metrics_port)):
        if not -1 <= value <= 65535 or (flag == "--port" and value < 0):
            return f"{flag} must be a port number (got {value})"
    if args.max_body_bytes < 1024:
        return f"--max-body-bytes must be at least 1024 (got {args.max_body_bytes})"
    for flag, seconds in (
        ("--tls-reload-interval", args.tls_reload_interval),
        ("--policy-poll-interval", args.policy_poll_interval),
    ):
        if seconds <= 0:
            return f"{flag} must be a positive number of seconds (got {seconds})"
    return None


def _self_signed(directory: Path | None) -> tuple[Path, Path, Path]:
    """Write ca.crt, tls.crt, tls.key for localhost/127.0.0.1; returns (ca, cert, key)."""
    from webhook.certs.keys import make_ca, make_serving_cert, write_atomically, write_pair

    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
    target = directory or Path(tempfile.mkdtemp(prefix="topoplace-webhook-"))
    ca = make_ca("topoplace-webhook-local-ca")
    pair = make_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1", "::1"])
    paths = (target / "ca.crt", target / "tls.crt", target / "tls.key")
    write_atomically(paths[0], ca.cert_pem)
    write_pair(pair, paths[1], paths[2])
    return paths


async def _serve(
    args: argparse.Namespace, settings: EngineSettings, cert: Path, key: Path, host: str
) -> int:
    import asyncio
    import contextlib
    import signal

    from webhook.policy.loader import PolicyLoadError
    from webhook.server.app import ServerConfig
    from webhook.server.runner import WebhookServer
    from webhook.server.tls import limit_tls_read_buffers

    limit_tls_read_buffers()

    config = ServerConfig(
        policies_dir=args.policies,
        cert_path=cert,
        key_path=key,
        host=host,
        port=args.port,
        metrics_port=None if args.metrics_port < 0 else args.metrics_port,
        settings=settings,
        max_body_bytes=args.max_body_bytes,
        tls_reload_interval=args.tls_reload_interval,
        policy_poll_interval=args.policy_poll_interval,
        shutdown_timeout=args.shutdown_timeout,
        node_cache=args.node_cache,
        workload_spans=args.workload_spans,
        workload_api=args.node_cache,
        kubeconfig=args.kubeconfig,
        claim_template_cache=args.claim_template_cache,
        numa_scheduling=args.numa_scheduling,
        scheduler_accounting=args.scheduler_accounting,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        try:
            # gc.freeze() once the node cache's first list is in (runner.freeze_when_loaded).
            server = await stack.enter_async_context(WebhookServer(config, freeze_gc=True))
        except PolicyLoadError as exc:
            print(
                f"topoplace-webhook serve: the policy set in {args.policies} is invalid; "
                "fix these and start again:",
                file=sys.stderr,
            )
            for message in exc.messages:
                print(f"  {message}", file=sys.stderr)
            return _EXIT_POLICIES
        except OSError as exc:
            print(
                f"topoplace-webhook serve: cannot listen on {host} "
                f"(port {args.port}, metrics port {args.metrics_port}): {exc}",
                file=sys.stderr,
            )
            return _EXIT_STARTUP
        print(f"listening: {server.url}", flush=True)
        if server.metrics_port is not None:
            metrics_host = server.url.split("//", 1)[1].rsplit(":", 1)[0]
            print(f"metrics: http://{metrics_host}:{server.metrics_port}/metrics", flush=True)
        logger.info("serving admission requests", extra={"url": server.url})
        await stop.wait()
        logger.info("stopping: refusing new connections, finishing in-flight requests")
    return 0


def run(args: argparse.Namespace) -> int:
    problem = _usage_problem(args)
    settings = settings_from_args(args)
    if problem is not None or isinstance(settings, str):
        print(f"topoplace-webhook serve: {problem or settings}", file=sys.stderr)
        return _EXIT_USAGE
    import asyncio
    import shutil
    import ssl

    from webhook.server.tls import make_server_context

    made_dir: Path | None = None
    if args.self_signed:
        ca, cert, key = _self_signed(args.self_signed_dir)
        made_dir = None if args.self_signed_dir else ca.parent
        print(f"ca: {ca}", flush=True)
    else:
        cert, key = args.tls_cert, args.tls_key
    try:
        try:
            make_server_context(cert, key)  # fail fast with a clear message
        except (OSError, ssl.SSLError) as exc:
            print(
                f"topoplace-webhook serve: cannot load the TLS key pair {cert} + {key}: {exc}; "
                "check both files exist, are PEM, and belong together",
                file=sys.stderr,
            )
            return _EXIT_STARTUP
        host = args.host or ("127.0.0.1" if args.self_signed else "0.0.0.0")
        return asyncio.run(_serve(args, settings, cert, key, host))
    finally:
        if made_dir is not None:
            shutil.rmtree(made_dir, ignore_errors=True)
