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
    "no_nodes",
    "node_documents",
    "objects_of",
    "read_fleet",
    "read_fleet_and_pods",
]

CURRENT = Path("-")  # --kubeconfig without a path: $KUBECONFIG or ~/.kube/config
# Free capacity per NUMA node, which `explain` reads beside the Nodes of the same file.
_NRT = "NodeResourceTopology"


class FleetError(Exception):
    """The nodes could not be read (the message says from where and why)."""


def add_fleet_arguments(parser: argparse.ArgumentParser, *, purpose: str) -> None:
    from common.yaml_input import LISTING, describe

    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--nodes",
        type=Path,
        metavar="FILE",
        help=f"`kubectl get nodes -o yaml` output: the nodes {purpose} ({describe(LISTING)})",
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
    """The objects of a `kubectl get ... -o yaml` file, each `List` opened into its items.

    Read within the bounds of an input file (common/yaml_input); YamlInputError for a file
    with no documents or a document that is not an object."""
    from common.yaml_input import LISTING, read_text
    from webhook.yaml_io import YamlInputError, load_documents

    docs = load_documents(read_text(path, bounds=LISTING), source=str(path))
    if not docs:
        raise YamlInputError(f"{path}: empty (expected `kubectl get ... -o yaml` output)")
    items: list[Any] = []
    for index, doc in enumerate(docs, start=1):
        listed = doc.get("items") if isinstance(doc, dict) else None
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List"):
            if listed is not None and not isinstance(listed, list):
                raise YamlInputError(f"{path}: document {index}: items is not a list")
            items.extend(listed or [])
        else:
            items.append(doc)
    for index, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise YamlInputError(
                f"{path}: object {index} is a {type(item).__name__}, not a Kubernetes object"
            )
    return items


def objects_of(path: Path, kind: str, *, flag: str, also: tuple[str, ...] = ()) -> list[Any]:
    """The objects of `path` (`kind`, an object without kind, or one of `also`); a file that
    holds other kinds (pods given as nodes) is a YamlInputError saying what was expected."""
    from webhook.yaml_io import YamlInputError

    docs = node_documents(path)
    wrong = sorted({str(d.get("kind")) for d in docs} - {"None", kind, *also})
    if wrong:
        raise YamlInputError(
            f"{flag} {path}: holds {', '.join(wrong)} objects; expected {kind} objects "
            f"(`kubectl get {kind.lower()}s -o yaml` output)"
        )
    return docs


def no_nodes(path: Path) -> str:
    """What to say of a `--nodes` file without a Node: "0 of 0 nodes fit" would mislead."""
    return f"--nodes {path}: holds no Node objects (expected `kubectl get nodes -o yaml` output)"


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
    from webhook.placement_model.filters.nodes import NodeError, node_views
    from webhook.yaml_io import YamlInputError

    try:
        if args.nodes is not None:
            docs = objects_of(args.nodes, "Node", flag="--nodes", also=(_NRT,))
            views = node_views(d for d in docs if d.get("kind") != _NRT)
            if not views:
                raise FleetError(no_nodes(args.nodes))
            placed = objects_of(pods, "Pod", flag="--pods") if pods is not None else []
        elif args.kubeconfig is not None:
            from webhook.cli.read_cluster import read_cluster

            kubeconfig = None if args.kubeconfig == CURRENT else args.kubeconfig
            cluster = asyncio.run(read_cluster(kubeconfig, policies_configmap=None))
            views, placed = cluster.nodes, cluster.pods
        else:
            return None
    except OSError as exc:
        raise FleetError(f"cannot read the nodes or pods: {exc}") from None
    except (YamlInputError, NodeError, ConfigError) as exc:
        raise FleetError(str(exc)) from None
    except ApiError as exc:
        raise FleetError(f"the API server answered {exc}") from None
    return [(view.name, dict(view.labels)) for view in views], placed
