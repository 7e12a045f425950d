"""`kubectl topoplace explain`: `topoplace-webhook explain` with the cluster as the default.

Without --nodes or --kubeconfig it reads the current kubeconfig context, as kubectl plugins
do; everything else is webhook/cli/explain/command.py.
"""

from __future__ import annotations

import argparse

from webhook.cli.explain.command import add_arguments as _add_arguments
from webhook.cli.explain.command import run

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _add_arguments(parser, cluster_default=True)
