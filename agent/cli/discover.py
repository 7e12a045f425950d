"""`topoplace-agent discover`: read this node's hardware once and print labels and topology."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

__all__ = ["add_arguments", "run"]

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from agent.cli.discovery_flags import add_discovery_arguments

    add_discovery_arguments(parser)
    parser.add_argument(
        "--pod-resources-socket",
        type=Path,
        default=None,
        metavar="PATH",
        help="also ask the kubelet's PodResources socket which NICs each RDMA resource holds "
        "(as `run` does; default: do not ask)",
    )
    parser.add_argument(
        "--output",
        choices=["json", "table"],
        default="json",
        help="json: {labels, annotations, topology} (default); table: a human view",
    )


def run(args: argparse.Namespace) -> int:
    from agent.cli.discovery_flags import options_from_args
    from agent.discovery.discover import DiscoveryError, discover
    from agent.discovery.table import render_table

    try:
        result = discover(options_from_args(args))
    except DiscoveryError as e:
        log.error("discovery failed: %s", e)
        return 1
    if args.output == "table":
        text = render_table(result.labels, result.topology)
    else:
        doc = {
            "labels": dict(result.labels),
            "annotations": dict(result.annotations),
            "topology": result.topology.as_dict(),
        }
        text = json.dumps(doc, indent=2) + "\n"
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # `discover | head`: the reader went away, which is not a failure of discovery;
        # point stdout at /dev/null so the interpreter's final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
