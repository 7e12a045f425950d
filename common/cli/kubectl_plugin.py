"""`kubectl topoplace …`: the kubectl plugin (kubectl runs `kubectl-topoplace` from $PATH).

The inspection and offline commands of both parts under one name, with the current
kubeconfig context as the default cluster: `kubectl topoplace explain pod.yaml` reads the
nodes, the pods bound to them and the served policies from the cluster. Commands are named
by module path (imported only when chosen), so this module imports neither part.
"""

from __future__ import annotations

import importlib.util

from common.cli.subcommands import Command, make_main

__all__ = ["COMMANDS", "main"]

COMMANDS: dict[str, Command] = {
    "explain": (
        "webhook.cli.explain.kubectl",
        "which nodes a pod fits, node by node, and why not (default: the current context)",
    ),
    "mutate": ("webhook.cli.mutate", "apply policies to a Pod or workload file, offline"),
    "validate": ("webhook.cli.validate", "check every policy file in a directory"),
    "spans": (
        "webhook.cli.spans",
        "the domains each running workload's pods span, and the most hops between two",
    ),
}
# "Did placement work?": the agent's audit, where this installation has it.
if importlib.util.find_spec("agent.cli.audit") is not None:
    COMMANDS["audit"] = ("agent.cli.audit", "judge running GPU containers' alignment")

main = make_main("kubectl topoplace", __doc__ or "", COMMANDS)
