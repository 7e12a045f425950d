"""`topoplace-webhook mutate`: apply the policies to a Pod or workload file, offline.

Like `kyverno apply`: read FILE (or `-` for stdin), mutate every pod template the way the
webhook would mutate the pods created from it, and print the result, the patch or a diff.
Warnings go to stderr; a denial exits 1; bad policies or input exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from webhook.cli.engine_flags import add_engine_arguments, settings_from_args

__all__ = ["add_arguments", "run"]

EXIT_DENIED = 1
EXIT_BAD_INPUT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from common.yaml_input import LISTING, describe

    parser.add_argument(
        "file",
        metavar="FILE",
        help=f"YAML with Pods or workloads; - for stdin ({describe(LISTING)})",
    )
    parser.add_argument(
        "--policies", type=Path, required=True, metavar="DIR", help="directory of policy *.yaml"
    )
    parser.add_argument(
        "-n",
        "--namespace",
        metavar="NS",
        help="namespace for objects without metadata.namespace (default: default)",
    )
    parser.add_argument(
        "--output",
        choices=("pod", "patch", "diff", "templates"),
        default="pod",
        help="print the mutated objects (pod), the JSON patches, a unified diff, or the DRA "
        "ResourceClaimTemplates the mutated pods reference (templates)",
    )
    add_engine_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from common.yaml_input import LISTING, read_text
    from webhook.policy.loader import PolicyLoadError, load_policy_dir
    from webhook.workloads.documents import DocumentError, mutate_documents, render
    from webhook.yaml_io import YamlInputError, load_documents

    settings = settings_from_args(args)
    if isinstance(settings, str):
        print(f"error: {settings}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        policies = load_policy_dir(args.policies)
    except PolicyLoadError as exc:
        for message in exc.messages:
            print(f"error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    source = "<stdin>" if args.file == "-" else args.file
    try:
        docs = load_documents(read_text(args.file, bounds=LISTING), source=source)
    except OSError as exc:
        print(f"error: cannot read {source}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except YamlInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    try:
        results = mutate_documents(
            docs, policies=policies, settings=settings, namespace=args.namespace or "default"
        )
    except DocumentError as exc:
        print(f"error: {source}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for result in results:
        for warning in result.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    denials = [denial for result in results for denial in result.denials]
    if denials:
        for denial in _once(denials):
            print(f"error: denied: {denial}", file=sys.stderr)
        return EXIT_DENIED
    if args.output == "templates":
        sys.stdout.write(_templates(results, policies, args.namespace or "default"))
    else:
        sys.stdout.write(render(results, output=args.output))
    return 0


def _once(denials: list[str]) -> list[str]:
    """One line per reason: the templates of one workload are denied for the same one."""
    where: dict[str, list[str]] = {}
    for denial in denials:
        place, sep, reason = denial.partition(": ")
        where.setdefault(reason if sep else denial, []).append(place if sep else "")
    lines = []
    for reason, places in where.items():
        more = f" and {len(places) - 1} more" if len(places) > 1 else ""
        lines.append(f"{places[0]}{more}: {reason}" if places[0] else reason)
    return lines


def _templates(results: list[Any], policies: Any, namespace: str) -> str:
    """Each template once, as `claim-templates` would create it in the pod's namespace."""
    from webhook.claims.templates import templates_for_pod
    from webhook.workloads.templates import pod_templates
    from webhook.yaml_io import dump_documents

    found: dict[tuple[str, str], dict[str, Any]] = {}
    for result in results:
        ns = (result.after.get("metadata") or {}).get("namespace") or namespace
        for template in pod_templates(result.after):
            for body in templates_for_pod(template.pod, ns, policies):
                found.setdefault((ns, body["metadata"]["name"]), body)
    return dump_documents(list(found.values())) if found else ""
