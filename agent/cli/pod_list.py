"""Which pods run on this node, with their UIDs: what `audit` needs to find their cgroups.

PodResources names pods; the kernel's cgroups number them. `--pods FILE` reads a PodList
(`kubectl get pods -A -o json --field-selector spec.nodeName=NODE`), else `--node-name`
(default $NODE_NAME, which the DaemonSet sets) lists them from the API server. With neither,
every GPU pod's locality is `unknown`.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.cli.cluster_flags import add_kubeconfig_argument

if TYPE_CHECKING:
    from agent.audit.measure import PodRef

__all__ = ["PodListError", "add_pod_list_arguments", "pod_refs"]

# A node runs at most a few hundred pods (maxPods 110 by default); a file larger than this is
# not one node's pod list.
_MAX_FILE = 64 << 20


class PodListError(Exception):
    """The pod list could not be read (file or API server)."""


def add_pod_list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pods",
        type=Path,
        metavar="FILE",
        help="a PodList (kubectl get pods -o json) giving the pods' UIDs, instead of asking "
        "the API server",
    )
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME") or None,
        metavar="NAME",
        help="list this node's pods from the API server for their UIDs (default: $NODE_NAME)",
    )
    add_kubeconfig_argument(parser)


def _from_file(path: Path) -> list[dict[str, Any]]:
    try:
        if path.stat().st_size > _MAX_FILE:
            raise PodListError(f"{path}: larger than {_MAX_FILE >> 20} MiB")
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PodListError(f"{path}: not a readable JSON PodList ({e})") from None
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise PodListError(f"{path}: no items list (want kubectl get pods -o json)")
    return [i for i in items if isinstance(i, dict)]


async def _from_api(node: str, kubeconfig: Path | None) -> list[dict[str, Any]]:
    from kubernetes_asyncio import client

    from common.kube.read import list_all
    from common.kube_config import load_configuration

    configuration = await load_configuration(kubeconfig)
    async with client.ApiClient(configuration) as api:
        core = client.CoreV1Api(api)
        items, _ = await list_all(
            core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}"
        )
    return items


def pod_refs(args: argparse.Namespace) -> list[PodRef]:
    """PodListError when --pods is unreadable or the API server cannot list the pods."""
    import asyncio

    import aiohttp
    from kubernetes_asyncio.client.exceptions import ApiException

    from agent.audit.measure import pod_ref
    from common.kube.read import ApiError
    from common.kube_config import ConfigError

    if args.pods is not None:
        items = _from_file(args.pods)
    elif args.node_name:
        try:
            items = asyncio.run(_from_api(args.node_name, args.kubeconfig))
        except (ConfigError, OSError, ApiError, ApiException, aiohttp.ClientError,
                TimeoutError) as e:  # fmt: skip
            raise PodListError(f"listing the pods of node {args.node_name}: {e}") from None
    else:
        return []
    return [ref for item in items if (ref := pod_ref(item)) is not None]
