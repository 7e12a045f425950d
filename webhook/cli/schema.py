"""`topoplace-webhook schema`: print the JSON Schema of PlacementPolicy for editors."""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


def run(args: argparse.Namespace) -> int:
    del args
    from webhook.policy.model import PlacementPolicy

    schema = PlacementPolicy.model_json_schema(by_alias=True)
    sys.stdout.write(json.dumps(schema, indent=2) + "\n")
    return 0
