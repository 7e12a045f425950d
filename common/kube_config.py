"""Cluster client configuration shared by every command that talks to the API server.

In a pod (KUBERNETES_SERVICE_HOST set, no --kubeconfig): the service account. Otherwise a
kubeconfig: --kubeconfig, else $KUBECONFIG or ~/.kube/config. Each caller gets its own
Configuration object, never the library's process-wide default.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from kubernetes_asyncio import client, config

__all__ = [
    "ConfigError",
    "api_client_until_ready",
    "load_configuration",
    "load_configuration_until_ready",
]

log = logging.getLogger(__name__)


class ConfigError(Exception):
    """No usable cluster configuration (in-cluster or kubeconfig)."""


def _check_exists(kubeconfig: Path | None) -> None:
    # The library's own message for a missing file ("Expected key current-context") misleads.
    if kubeconfig is not None and not kubeconfig.is_file():
        raise ConfigError(f"--kubeconfig {kubeconfig}: no such file")


async def load_configuration(kubeconfig: Path | None) -> client.Configuration:
    _check_exists(kubeconfig)
    cfg = client.Configuration()
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
            log.info("using in-cluster configuration")
        else:
            # None lets the library read $KUBECONFIG or ~/.kube/config.
            path = str(kubeconfig) if kubeconfig is not None else None
            await config.load_kube_config(
                config_file=path, client_configuration=cfg, persist_config=False
            )
            log.info("using kubeconfig", extra={"kubeconfig": path or "$KUBECONFIG/default"})
    except (config.ConfigException, OSError, ValueError) as exc:
        raise ConfigError(
            f"no usable Kubernetes configuration ({exc}); run inside a pod with a service "
            "account, or pass --kubeconfig FILE / set KUBECONFIG"
        ) from exc
    return cfg


async def load_configuration_until_ready(
    kubeconfig: Path | None,
    *,
    what: str,
    sleep: Callable[[float], Awaitable[None]],
    next_delay: Callable[[], float],
) -> client.Configuration:
    """`load_configuration`, retried with the caller's backoff while there is none yet: a
    long-running watcher keeps trying (and its process keeps serving) instead of exiting."""
    while True:
        try:
            return await load_configuration(kubeconfig)
        except ConfigError as exc:
            log.warning("%s: no cluster configuration; retrying", what, extra={"error": str(exc)})
            await sleep(next_delay())


@asynccontextmanager
async def api_client_until_ready(
    kubeconfig: Path | None,
    *,
    what: str,
    sleep: Callable[[float], Awaitable[None]],
    next_delay: Callable[[], float],
) -> AsyncIterator[client.ApiClient]:
    """An ApiClient on `load_configuration_until_ready`'s configuration: what every
    long-running cache opens before its list+watch."""
    cfg = await load_configuration_until_ready(
        kubeconfig, what=what, sleep=sleep, next_delay=next_delay
    )
    async with client.ApiClient(cfg) as api:
        yield api
