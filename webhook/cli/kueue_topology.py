"""`topoplace-webhook kueue-topology [--kubeconfig [F] | --nodes FILE]`: a Kueue Topology (and
its ResourceFlavor) from the position levels the nodes carry, as YAML on stdout.

The levels are the agent's `topoplace.io/network-tier-3/2/1` and `nvlink-domain`, outermost
first, each kept only where it nests in the one above (webhook/placement_model/levels.py), then
`kubernetes.io/hostname`. What was left out, and nodes lacking a level, are notes on stderr.
Exit 0; 1 when no node carries any level; 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_arguments", "run", "topology_objects"]

KUEUE_API = "kueue.x-k8s.io/v1beta2"
# Kueue wants at least one node label on a flavor with a Topology; every kubelet sets this one.
_DEFAULT_NODE_LABEL = ("kubernetes.io/os", "linux")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from webhook.cli.fleet import add_fleet_arguments

    add_fleet_arguments(parser, purpose="whose levels make the Topology")
    parser.add_argument(
        "--node-label",
        action="append",
        type=_label,
        metavar="KEY=VALUE",
        help="the ResourceFlavor's nodeLabels (Kueue needs one with a Topology; repeatable; "
        "default: kubernetes.io/os=linux, every Linux node)",
    )
    parser.add_argument(
        "--name",
        type=_name,
        default="topoplace",
        metavar="NAME",
        help="the Topology's name; the ResourceFlavor is NAME-flavor (default: %(default)s)",
    )


def _label(text: str) -> tuple[str, str]:
    from common.k8s_names import label_key_problem, label_value_problem

    key, sep, value = text.partition("=")
    problem = (
        "expected KEY=VALUE" if not sep else label_key_problem(key) or label_value_problem(value)
    )
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r}: {problem}")
    return key, value


# The ResourceFlavor is NAME-flavor: both names must be valid.
_FLAVOR_SUFFIX = "-flavor"


def _name(text: str) -> str:
    from common.k8s_names import object_name_problem

    problem = object_name_problem(text) or object_name_problem(text + _FLAVOR_SUFFIX)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def topology_objects(
    keys: tuple[str, ...], name: str, node_labels: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The Topology with these levels and a ResourceFlavor that uses it."""
    return [
        {
            "apiVersion": KUEUE_API,
            "kind": "Topology",
            "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": key} for key in keys]},
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "ResourceFlavor",
            "metadata": {"name": f"{name}{_FLAVOR_SUFFIX}"},
            "spec": {
                "nodeLabels": node_labels or dict([_DEFAULT_NODE_LABEL]),
                "topologyName": name,
            },
        },
    ]


def run(args: argparse.Namespace) -> int:
    import yaml

    from webhook.cli.fleet import CURRENT, FleetError, read_fleet
    from webhook.placement_model.levels import HOSTNAME, fleet_levels

    if args.nodes is None and args.kubeconfig is None:
        args.kubeconfig = CURRENT  # the cluster by default, as kubectl would
    try:
        nodes = read_fleet(args) or []
    except FleetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    levels = fleet_levels(nodes)
    for note in levels.notes:
        print(f"note: {note}", file=sys.stderr)
    if levels.keys == (HOSTNAME,):
        print(
            f"error: none of the {len(nodes)} nodes carries a topoplace.io/network-tier-N or "
            "nvlink-domain label (docs/network-position.md)",
            file=sys.stderr,
        )
        return 1
    objects = topology_objects(levels.keys, args.name, dict(args.node_label or []))
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False))
    return 0
