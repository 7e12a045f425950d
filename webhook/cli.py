"""`topoplace-webhook`: serve admission, mutate offline, validate policies, print the schema."""

from __future__ import annotations

from agent.subcommands import Command, make_main

__all__ = ["COMMANDS", "main"]

COMMANDS: dict[str, Command] = {
    "serve": ("webhook.cmd_serve", "serve AdmissionReview v1 over HTTPS"),
    "mutate": ("webhook.cmd_mutate", "apply policies to a Pod or workload file, offline"),
    "validate": ("webhook.cmd_validate", "check every policy file in a directory"),
    "schema": ("webhook.cmd_schema", "print the JSON Schema of PlacementPolicy"),
    "certs": ("webhook.cmd_certs", "keep the in-cluster serving certificate and caBundle fresh"),
}

main = make_main("topoplace-webhook", __doc__ or "", COMMANDS)
