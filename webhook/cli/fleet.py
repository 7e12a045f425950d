"""Where a command reads the fleet's nodes from: a `kubectl get nodes -o yaml` file or the
cluster (`--kubeconfig`, the user's own credentials). Shared by `validate` and
`kueue-topology`; `explain` reads the same file format."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

__all__ = [
    "CURRENT",
    "FleetError",
    "add_fleet_arguments",
    "node_documents",
    "read_fleet",
    "read_fleet_and_pods",
]

CURRENT = Path("-")  # --kubeconfig without a path: $KUBECONFIG or ~/.kube/config


class FleetError(Exception):
    """The nodes could not be read (the message says from where and why)."""


def add_fleet_arguments(parser: argparse.ArgumentParser, *, purpose: str) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--nodes",
        type=Path,
        metavar="FILE",
        help=f"`kubectl get nodes -o yaml` output: the nodes {purpose}",
    )
    source.add_argument(
        "--kubeconfig",
        nargs="?",
        const=CURRENT,
        type=Path,
        metavar="PATH",
        help=f"read the nodes {purpose} from the cluster (no PATH: $KUBECONFIG or ~/.kube/config)",
    )


def node_documents(path: Path) -> list[Any]:
    """The documents of a nodes file, a `List` opened into its items."""
    from webhook.yaml_io import load_documents

    text = path.read_text("utf-8")
    return [
        item
        for doc in load_documents(text, source=str(path))
        for item in (doc.get("items") or [] if doc.get("kind") == "List" else [doc])
    ]


def read_fleet(args: argparse.Namespace) -> list[tuple[str, dict[str, str]]] | None:
    """(name, labels) of every node; None when neither flag was given."""
    read = _read(args, pods=None)
    return None if read is None else read[0]


def read_fleet_and_pods(
    args: argparse.Namespace, pods: Path | None
) -> tuple[list[tuple[str, dict[str, str]]], list[dict[str, Any]]] | None:
    """The nodes as `read_fleet` gives them and the pods placed on them: from `pods` (a
    `kubectl get pods -o yaml` file) beside --nodes, or from the cluster."""
    return _read(args, pods=pods)


def _read(
    args: argparse.Namespace, *, pods: Path | None
) -> tuple[list[tuple[str, dict[str, str]]], list[dict[str, Any]]] | None:
    from common.kube_config import ConfigError
    from webhook.kube_read import ApiError
    from webhook.topology.filters.nodes import NodeError, node_views
    from webhook.yaml_io import YamlInputError

    try:
        if args.nodes is not None:
            docs = [d for d in node_documents(args.nodes) if d.get("kind") in (None, "Node")]
            views = node_views(docs)
            placed = (
                [d for d in node_documents(pods) if d.get("kind") in (None, "Pod")]
                if pods is not None
                else []
            )
        elif args.kubeconfig is not None:
            from webhook.cli.read_cluster import read_cluster

            kubeconfig = None if args.kubeconfig == CURRENT else args.kubeconfig
            cluster = asyncio.run(read_cluster(kubeconfig, policies_configmap=None))
            views, placed = cluster.nodes, cluster.pods
        else:
            return None
    except (OSError, UnicodeDecodeError) as exc:
        raise FleetError(f"cannot read the nodes or pods: {exc}") from None
    except (YamlInputError, NodeError, ConfigError) as exc:
        raise FleetError(str(exc)) from None
    except ApiError as exc:
        raise FleetError(f"the API server answered {exc}") from None
    return [(view.name, dict(view.labels)) for view in views], placed
