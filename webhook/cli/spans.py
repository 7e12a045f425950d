"""`topoplace-webhook spans [--kubeconfig [F] | --nodes FILE --pods FILE]`: the audit per
workload, the domains each running workload's pods span and the most hops between two of
them (webhook/spans/report.py), as a table or JSON on stdout.

The cluster (current kubeconfig context) by default, as kubectl would. Exit 0; 2 on bad
input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from common.yaml_input import LISTING, describe
    from webhook.cli.fleet import add_fleet_arguments

    add_fleet_arguments(parser, purpose="the pods run on")
    parser.add_argument(
        "--pods",
        type=Path,
        metavar="FILE",
        help=f"`kubectl get pods -A -o yaml` output: the pods to audit (with --nodes; "
        f"{describe(LISTING)})",
    )
    parser.add_argument(
        "-n", "--namespace", metavar="NS", help="only the workloads of this namespace"
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="a table for people (default) or JSON for scripts",
    )


def run(args: argparse.Namespace) -> int:
    from webhook import jsonio
    from webhook.cli.fleet import CURRENT, FleetError, read_fleet_and_pods
    from webhook.spans.report import to_json, to_table, workload_spans

    if (args.pods is None) != (args.nodes is None):
        print("error: --pods FILE and --nodes FILE go together", file=sys.stderr)
        return 2
    if args.nodes is None and args.kubeconfig is None:
        args.kubeconfig = CURRENT
    try:
        read = read_fleet_and_pods(args, args.pods)
    except FleetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    nodes, pods = read or ([], [])
    if args.namespace:
        pods = [p for p in pods if (p.get("metadata") or {}).get("namespace") == args.namespace]
    rows = workload_spans(pods, dict(nodes))
    if args.output == "json":
        sys.stdout.write(jsonio.dumps(to_json(rows)).decode() + "\n")
    else:
        sys.stdout.write(to_table(rows))
    return 0
