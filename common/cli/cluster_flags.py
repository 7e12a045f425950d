"""Command-line flags shared by the commands that talk to the API server.

Kept free of kubernetes_asyncio imports so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

__all__ = ["add_kubeconfig_argument", "add_node_name_argument"]


def add_node_name_argument(parser: argparse.ArgumentParser, *, purpose: str) -> None:
    """--node-name, defaulting to $NODE_NAME (the DaemonSet sets it from the downward API)."""
    node_default = os.environ.get("NODE_NAME") or None
    parser.add_argument(
        "--node-name",
        default=node_default,
        required=node_default is None,
        metavar="NAME",
        help=f"the Node to {purpose} (default: $NODE_NAME, set from the downward API)",
    )


def add_kubeconfig_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        metavar="FILE",
        help="kubeconfig to use (default: in-cluster inside a pod, else $KUBECONFIG or "
        "~/.kube/config)",
    )
