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
from typing import Any

from kubernetes_asyncio import client, config

from common.yaml_input import CONFIG, YamlInputError, load_documents, read_text

__all__ = [
    "ConfigError",
    "api_client_until_ready",
    "check_kubeconfig",
    "follow_when_ready",
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


def _kubeconfig_files(kubeconfig: Path | None) -> list[Path]:
    """The files the library would read: --kubeconfig, else $KUBECONFIG's, else the default."""
    if kubeconfig is not None:
        return [kubeconfig]
    listed = [Path(p) for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    files = listed or [Path("~/.kube/config").expanduser()]
    return [f for f in files if f.is_file()]


_LISTS = ("clusters", "contexts", "users")
# What the library raises on a kubeconfig whose entries have the wrong shape, past what
# check_kubeconfig looks at.
_SHAPE_ERRORS = (TypeError, KeyError, AttributeError)


def check_kubeconfig(path: Path) -> None:
    """Raise ConfigError unless `path` is a bounded YAML mapping shaped like a kubeconfig
    (the library meets an empty or odd one with a TypeError deep inside)."""
    try:
        docs = load_documents(read_text(path, bounds=CONFIG), source=str(path), bounds=CONFIG)
    except OSError as exc:
        raise ConfigError(f"kubeconfig {path}: cannot read: {exc.strerror or exc}") from None
    except YamlInputError as exc:
        raise ConfigError(f"kubeconfig {exc}") from None
    expected = "expected a kubeconfig (kind: Config with clusters, contexts and users)"
    if not docs:
        raise ConfigError(f"kubeconfig {path}: empty; {expected}")
    if len(docs) > 1 or not isinstance(docs[0], dict):
        raise ConfigError(f"kubeconfig {path}: not one mapping; {expected}")
    doc = docs[0]
    for key in _LISTS:
        items = doc.get(key)
        if items is not None and (
            not isinstance(items, list)
            or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items)
        ):
            raise ConfigError(f"kubeconfig {path}: {key} must be a list of named entries")
    if not isinstance(doc.get("current-context", ""), str):
        raise ConfigError(f"kubeconfig {path}: current-context must be a string")


async def load_configuration(kubeconfig: Path | None) -> client.Configuration:
    _check_exists(kubeconfig)
    cfg = client.Configuration()
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
            log.info("using in-cluster configuration")
        else:
            for file in _kubeconfig_files(kubeconfig):
                check_kubeconfig(file)
            # None lets the library read $KUBECONFIG or ~/.kube/config.
            path = str(kubeconfig) if kubeconfig is not None else None
            await config.load_kube_config(
                config_file=path, client_configuration=cfg, persist_config=False
            )
            log.info("using kubeconfig", extra={"kubeconfig": path or "$KUBECONFIG/default"})
    except ConfigError:
        raise
    except (config.ConfigException, OSError, ValueError, *_SHAPE_ERRORS) as exc:
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


async def follow_when_ready(
    kubeconfig: Path | None,
    follow: Callable[[Any], Awaitable[None]],
    *,
    api: str,
    what: str,
    sleep: Callable[[float], Awaitable[None]],
    next_delay: Callable[[], float],
) -> None:
    """A long-running cache's `run`: wait for a usable configuration, then hand `follow` (its
    list+watch) kubernetes-asyncio's `client.<api>` (`"CoreV1Api"`, …) until cancelled. The
    cache itself says only which list it follows and what it does with an object."""
    async with api_client_until_ready(
        kubeconfig, what=what, sleep=sleep, next_delay=next_delay
    ) as api_client:
        await follow(getattr(client, api)(api_client))
