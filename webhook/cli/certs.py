"""`topoplace-webhook certs`: keep the shared serving certificate and the caBundle fresh.

Runs as a native sidecar beside `serve` in every webhook replica. Each pass:
1. reads the Secret; when it is missing, unusable or expiring within --renew-before-days,
   writes a new pair with optimistic concurrency (create → 409 AlreadyExists or replace with
   resourceVersion → 409 Conflict means another replica wrote first: re-read and use theirs),
   so all replicas serve ONE pair;
2. writes tls.crt/tls.key into --out-dir (an emptyDir shared with `serve`, which reloads on
   content change) only when the content differs;
3. sets `caBundle` on every webhook of the MutatingWebhookConfiguration whose bundle differs.
Then it sleeps --check-interval seconds. Failures are logged and retried with capped,
jittered backoff; the sidecar never exits on a transient error (except with --once).

The decisions live in webhook/certs/bootstrap.py, one pass of I/O in webhook/certs/sync.py;
this module is the command line and the retry loop around them.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from common.cli.cluster_flags import add_kubeconfig_argument
from common.kube.errors import describe, retry_after
from webhook.certs.sync import CertSync, ConflictStorm, Settings, WebhookConfigMissing

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

__all__ = [
    "add_arguments",
    "api_client_for",
    "run",
    "run_loop",
]

log = logging.getLogger("topoplace.certs")

# --once gives up after this many failed passes (a person or a test is waiting).
_ONCE_ATTEMPTS = 3
_BACKOFF_CAP_S = 60.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--namespace", required=True, help="namespace of the Secret")
    parser.add_argument("--secret", required=True, help="Secret shared by all replicas")
    parser.add_argument("--service", required=True, help="Service name the API server calls")
    parser.add_argument(
        "--webhook-config", required=True, help="MutatingWebhookConfiguration to set caBundle on"
    )
    parser.add_argument(
        "--out-dir", required=True, type=Path, help="directory for tls.crt/tls.key (serve reads)"
    )
    parser.add_argument("--check-interval", type=float, default=300.0, metavar="S")
    parser.add_argument("--renew-before-days", type=int, default=30, metavar="DAYS")
    parser.add_argument("--validity-days", type=int, default=365, metavar="DAYS")
    parser.add_argument("--once", action="store_true", help="one successful pass, then exit")
    add_kubeconfig_argument(parser)


def _settings(args: argparse.Namespace) -> Settings | str:
    """Settings from the command line, or a message saying what to fix."""
    if args.validity_days < 2:
        return "--validity-days must be at least 2"
    if not 0 < args.renew_before_days < args.validity_days:
        return (
            f"--renew-before-days ({args.renew_before_days}) must be positive and smaller than "
            f"--validity-days ({args.validity_days}), or every pass would renew"
        )
    if args.check_interval <= 0:
        return "--check-interval must be positive"
    return Settings(
        namespace=args.namespace,
        secret=args.secret,
        service=args.service,
        webhook_config=args.webhook_config,
        out_dir=args.out_dir,
        check_interval=args.check_interval,
        renew_before=dt.timedelta(days=args.renew_before_days),
        validity_days=args.validity_days,
        once=args.once,
    )


def _describe(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    if status in (401, 403):
        return (
            f"HTTP {status} {getattr(exc, 'reason', '')}: check the webhook ServiceAccount's "
            "Role/ClusterRole (secrets get/create/update, mutatingwebhookconfigurations get/patch)"
        )
    return describe(exc)


async def run_loop(
    sync: CertSync,
    settings: Settings,
    *,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    rng: Callable[[], float] = random.random,
) -> int:
    """Pass after pass; returns only with --once (0 after a good pass, 1 after giving up)."""
    from aiohttp import ClientError
    from kubernetes_asyncio.client.exceptions import ApiException

    from common.backoff import Backoff, BackoffPolicy

    transient = (ApiException, ClientError, OSError, ConflictStorm, WebhookConfigMissing)
    backoff = Backoff(BackoffPolicy(initial=1.0, cap=_BACKOFF_CAP_S), rand=rng)
    while True:
        try:
            result = await sync.sync_once()
        except transient as exc:
            if settings.once and backoff.attempts + 1 >= _ONCE_ATTEMPTS:
                log.error("certificate sync failed, giving up (--once): %s", _describe(exc))
                return 1
            delay = backoff.next_delay(retry_after=retry_after(getattr(exc, "headers", None)))
            log.warning(
                "certificate sync failed (%s); retrying in %.1f s",
                _describe(exc),
                delay,
                extra={"failures": backoff.attempts},
            )
            await sleep(delay)
            continue
        backoff.reset()
        log.debug(
            "certificate sync pass done",
            extra={"action": result.action.value, "reason": result.reason},
        )
        if settings.once:
            return 0
        await sleep(settings.check_interval)


async def api_client_for(kubeconfig: Path | None) -> ApiClient:
    """An ApiClient with its own Configuration: in-cluster inside a pod, else a kubeconfig."""
    from kubernetes_asyncio import client

    from common.kube_config import load_configuration

    return client.ApiClient(configuration=await load_configuration(kubeconfig))


async def _main(settings: Settings, kubeconfig: Path | None) -> int:
    from common.kube_config import ConfigError

    try:
        api = await api_client_for(kubeconfig)
    except ConfigError as exc:
        log.error("certs: cannot load Kubernetes client configuration: %s", exc)
        return 1
    async with api:
        return await run_loop(CertSync(api, settings), settings)


def run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if isinstance(settings, str):
        log.error("certs: %s", settings)
        return 2
    try:
        return asyncio.run(_main(settings, args.kubeconfig))
    except KeyboardInterrupt:
        return 130
