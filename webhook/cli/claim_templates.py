"""`topoplace-webhook claim-templates`: keep DRA ResourceClaimTemplates in step with policies.

For every DRA policy (`spec.dra`), every existing namespace its `spec.namespaces` globs match
and every count in `gpuCounts`, one template `topoplace-<policy>-<N>gpu`; templates no policy
or namespace wants any more are deleted, templates Topoplace does not own are never touched.
It watches namespaces (a new one gets its templates within seconds) and its own templates,
and reloads the policies directory as `serve` does (the same ConfigMap volume).

Runs as its own single-replica Deployment (manifests/base/claim-templates/, strategy
Recreate): one writer, no Lease, and its own ServiceAccount, so the webhook's gets nothing.
Needs list/watch on namespaces and list/watch/create/delete on resourceclaimtemplates.
`/healthz` and `/readyz` (ready once the templates match the policies) on --health-port.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from common.cli.cluster_flags import add_kubeconfig_argument

__all__ = ["add_arguments", "run"]

log = logging.getLogger("topoplace.claim_templates")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policies", type=Path, required=True, metavar="DIR", help="directory of policy *.yaml"
    )
    parser.add_argument(
        "--resync-interval",
        type=float,
        default=60.0,
        metavar="S",
        help="full pass at least this often, events or not (default 60)",
    )
    parser.add_argument(
        "--policy-poll-interval",
        type=float,
        default=10.0,
        metavar="S",
        help="check the policies directory this often besides file events (default 10)",
    )
    parser.add_argument(
        "--host",
        default="0.0.0.0",
        help="listen address of /healthz and /readyz (default 0.0.0.0, for the kubelet)",
    )
    parser.add_argument(
        "--health-port",
        type=int,
        default=8081,
        metavar="PORT",
        help="port of /healthz and /readyz (default 8081; 0 picks a free one and prints it)",
    )
    add_kubeconfig_argument(parser)


async def _main(args: argparse.Namespace) -> int:
    from aiohttp import web

    from common.http_site import start_site
    from common.kube_config import ConfigError
    from webhook.claims.health import health_app
    from webhook.claims.reconciler import TemplateReconciler
    from webhook.cli.certs import api_client_for
    from webhook.policy.loader import PolicyLoadError
    from webhook.server.reload import PolicyStore, PolicyWatcher

    store = PolicyStore()
    reconciler: TemplateReconciler | None = None

    def swapped(_policies: object) -> None:
        if reconciler is not None:
            reconciler.poke()

    watcher = PolicyWatcher(args.policies, store, on_swap=swapped)
    try:
        watcher.load_initial()
    except PolicyLoadError as exc:
        for message in exc.messages:
            log.error("claim-templates: %s", message)
        return 2
    try:
        api = await api_client_for(args.kubeconfig)
    except ConfigError as exc:
        log.error("claim-templates: cannot load Kubernetes client configuration: %s", exc)
        return 1
    async with api:
        reconciler = TemplateReconciler(
            api, lambda: store.current, resync_interval=args.resync_interval
        )
        runner = web.AppRunner(health_app(lambda: reconciler.ready), access_log=None)
        try:
            port = await start_site(runner, args.host, args.health_port)
        except OSError as exc:
            log.error(
                "claim-templates: cannot listen on %s:%s: %s", args.host, args.health_port, exc
            )
            return 1
        try:
            print(f"health: http://{args.host}:{port}/readyz", flush=True)
            policies = asyncio.create_task(watcher.watch(args.policy_poll_interval))
            try:
                await reconciler.run()
            finally:
                policies.cancel()
                await asyncio.gather(policies, return_exceptions=True)
        finally:
            await runner.cleanup()
    return 0


def run(args: argparse.Namespace) -> int:
    for flag in ("resync_interval", "policy_poll_interval"):
        if getattr(args, flag) <= 0:
            log.error("claim-templates: --%s must be positive", flag.replace("_", "-"))
            return 2
    try:
        return asyncio.run(_main(args))
    except KeyboardInterrupt:
        return 130
