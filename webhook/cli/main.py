"""`topoplace-webhook`: serve admission, mutate offline, validate policies, print the schema."""

from __future__ import annotations

from common.cli.subcommands import Command, make_main

__all__ = ["COMMANDS", "main"]

COMMANDS: dict[str, Command] = {
    "serve": ("webhook.cli.serve", "serve AdmissionReview v1 over HTTPS"),
    "mutate": ("webhook.cli.mutate", "apply policies to a Pod or workload file, offline"),
    "explain": ("webhook.cli.explain.command", "which nodes a pod fits, node by node, and why not"),
    "validate": ("webhook.cli.validate", "check every policy file in a directory"),
    "schema": ("webhook.cli.schema", "print the JSON Schema of PlacementPolicy"),
    "kueue-topology": (
        "webhook.cli.kueue_topology",
        "print a Kueue Topology and ResourceFlavor from the nodes' network levels",
    ),
    "spans": (
        "webhook.cli.spans",
        "the domains each running workload's pods span, and the most hops between two",
    ),
    "certs": ("webhook.cli.certs", "keep the in-cluster serving certificate and caBundle fresh"),
    "claim-templates": (
        "webhook.cli.claim_templates",
        "keep DRA ResourceClaimTemplates in step with the DRA policies",
    ),
}

main = make_main("topoplace-webhook", __doc__ or "", COMMANDS)
