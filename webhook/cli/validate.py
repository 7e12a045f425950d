"""`topoplace-webhook validate DIR`: check every policy file; exit 0, or 1 with every problem.

A valid set may still get notes on stderr (webhook/policy/notes.py): what a policy asks for
that not every path delivers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", type=Path, metavar="DIR", help="directory of policy *.yaml")


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
    n, files = len(policies), len(policies.files)
    if not files:
        print(f"warning: {args.directory} holds no *.yaml files", file=sys.stderr)
    print(f"{n} polic{'ies' if n != 1 else 'y'} in {files} file{'s' if files != 1 else ''} OK")
    return 0
