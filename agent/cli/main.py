"""`topoplace-agent`: discover hardware, keep node labels in sync, prefetch datasets."""

from __future__ import annotations

from common.cli.subcommands import Command, make_main

__all__ = ["COMMANDS", "main"]

COMMANDS: dict[str, Command] = {
    "discover": ("agent.cli.discover", "read this node's hardware and print labels"),
    "run": ("agent.cli.run", "keep this node's labels in sync (the DaemonSet's command)"),
    "prefetch": ("agent.cli.prefetch", "download a dataset version into the node cache"),
    "audit": ("agent.cli.audit", "judge each running GPU container's CPU/memory/NIC alignment"),
    "cleanup": ("agent.cli.cleanup", "remove every label and annotation the agent owns"),
    "prepare-cache": ("agent.cli.prepare_cache", "make the dataset cache writable by prefetchers"),
}

main = make_main("topoplace-agent", __doc__ or "", COMMANDS)
