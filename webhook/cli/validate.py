"""`topoplace-webhook validate DIR`: check every policy file; exit 0, or 1 with every problem.

A valid set may still get notes on stderr (webhook/policy/notes.py): what a policy asks for
that not every path delivers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from common.yaml_input import POLICY, describe
    from webhook.cli.fleet import add_fleet_arguments

    parser.add_argument(
        "directory",
        type=Path,
        metavar="DIR",
        help=f"directory of policy *.yaml, each {describe(POLICY)} (docs/policies.md, Bounds)",
    )
    add_fleet_arguments(parser, purpose="the policies' keepTogether levels must be found on")


def run(args: argparse.Namespace) -> int:
    from webhook.policy.loader import PolicyLoadError, load_policy_dir
    from webhook.policy.notes import policy_notes

    try:
        policies = load_policy_dir(args.directory)
    except PolicyLoadError as exc:
        for message in exc.messages:
            print(f"error: {message}", file=sys.stderr)
        count = len(exc.messages)
        print(f"{count} problem{'s' if count != 1 else ''} in {args.directory}", file=sys.stderr)
        return 1
    for note in policy_notes(policies):
        print(f"note: {note}", file=sys.stderr)
    from webhook.cli.fleet import FleetError, read_fleet

    try:
        nodes = read_fleet(args)
    except FleetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if nodes is not None:
        for warning in _level_warnings(policies, nodes):
            print(f"warning: {warning}", file=sys.stderr)
    for note in _together_notes(policies, _scheduling(args)):
        print(f"note: {note}", file=sys.stderr)
    n, files = len(policies), len(policies.files)
    if not files:
        print(f"warning: {args.directory} holds no *.yaml files", file=sys.stderr)
    print(f"{n} polic{'ies' if n != 1 else 'y'} in {files} file{'s' if files != 1 else ''} OK")
    return 0


def _level_warnings(policies: Any, nodes: list[tuple[str, dict[str, str]]]) -> list[str]:
    from webhook.placement_model.levels import carried

    present = carried(labels for _, labels in nodes)
    out = []
    for name in policies.names:
        rule = policies[name].spec.placement.keep_together
        if rule is not None and rule.label_key not in present:
            out.append(
                f"{policies.origins[name]}: policy {name}: keepTogether level {rule.level}: "
                f"none of the {len(nodes)} nodes carries {rule.label_key}"
            )
    return out


def _scheduling(args: argparse.Namespace) -> Any:
    """What the cluster serves for gangs (--kubeconfig), else None: not looked at."""
    if getattr(args, "kubeconfig", None) is None:
        return None
    import asyncio

    from webhook.cli.fleet import CURRENT

    async def look() -> Any:
        from kubernetes_asyncio import client

        from common.kube_config import load_configuration
        from webhook.scheduler.workload_api import look_once

        kubeconfig = None if args.kubeconfig == CURRENT else args.kubeconfig
        async with client.ApiClient(await load_configuration(kubeconfig)) as api:
            return await look_once(api)

    return asyncio.run(look())


def _together_notes(policies: Any, scheduling: Any) -> list[str]:
    """Per keepTogether policy: which mechanism keeps each kind of workload together."""
    from webhook.workloads.gangs import mechanisms

    out = []
    for name in policies.names:
        rule = policies[name].spec.placement.keep_together
        if rule is not None:
            out.append(f"{policies.origins[name]}: policy {name}: {mechanisms(rule, scheduling)}")
    if out and scheduling is not None:
        out.append(f"this cluster: {scheduling.describe()}")
    return out
