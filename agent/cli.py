"""`topoplace-agent`: discover hardware, keep node labels in sync, prefetch datasets."""

from __future__ import annotations

from agent.subcommands import Command, make_main

__all__ = ["COMMANDS", "main"]

COMMANDS: dict[str, Command] = {
    "discover": ("agent.cmd_discover", "read this node's hardware and print labels"),
    "run": ("agent.cmd_run", "keep this node's labels in sync (the DaemonSet's command)"),
    "prefetch": ("agent.cmd_prefetch", "download a dataset version into the node cache"),
    "cleanup": ("agent.cmd_cleanup", "remove every label and annotation the agent owns"),
    "prepare-cache": ("agent.cmd_prepare_cache", "make the dataset cache writable by prefetchers"),
}

main = make_main("topoplace-agent", __doc__ or "", COMMANDS)
