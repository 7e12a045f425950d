"""`topoplace-agent cleanup`: remove every label and annotation the agent owns from a Node.

For uninstall (a Job or the DaemonSet's preStop). Keys outside `topoplace.io/` and
`dataset.topoplace.io/` stay. Idempotent: a node without owned keys, or no node at all,
is success. Transient API errors are retried a few times.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from common.cli.cluster_flags import add_kubeconfig_argument, add_node_name_argument

__all__ = ["add_arguments", "run"]

log = logging.getLogger(__name__)

_ATTEMPTS = 6


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_node_name_argument(parser, purpose="clean")
    add_kubeconfig_argument(parser)


async def _cleanup(node: str, kubeconfig: Path | None) -> int:
    import asyncio

    from agent.sync.labels.node_client import ApiRejected, NodeApiError, NodeNotFound, connect
    from agent.sync.labels.node_diff import NodeMeta, changes_between, cleanup_patch, describe
    from common.backoff import Backoff, BackoffPolicy

    backoff = Backoff(BackoffPolicy(initial=0.5, cap=5.0))
    async with connect(kubeconfig=kubeconfig) as nodes:
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                state = await nodes.get(node)
                body = cleanup_patch(state.meta)
                if body is None:
                    log.info(
                        "nothing to remove: no owned labels or annotations", extra={"node": node}
                    )
                    return 0
                removed = changes_between(state.meta, NodeMeta(labels={}, annotations={}))
                await nodes.patch(node, body)
                log.info(
                    "removed %d owned keys: %s",
                    len(removed),
                    "; ".join(describe(c) for c in removed),
                    extra={"node": node},
                )
                return 0
            except NodeNotFound:
                log.info("node not found: nothing to clean up", extra={"node": node})
                return 0
            except ApiRejected as exc:
                log.error("the API server refused: %s (check the agent's RBAC)", exc)
                return 1
            except NodeApiError as exc:
                if attempt == _ATTEMPTS:
                    log.error("giving up after %d attempts: %s", attempt, exc)
                    return 1
                delay = backoff.next_delay(retry_after=exc.retry_after)
                log.warning("%s; retrying in %.1fs", exc, delay, extra={"node": node})
                await asyncio.sleep(delay)
    return 1


def run(args: argparse.Namespace) -> int:
    import asyncio

    from common.kube_config import ConfigError

    try:
        return asyncio.run(_cleanup(args.node_name, args.kubeconfig))
    except ConfigError as exc:
        log.error("%s", exc)
        return 2  # bad input, as in every other command
