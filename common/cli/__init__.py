"""The command-line plumbing both commands share: `subcommands` (the entry points' parser and
dispatch), `kubectl_plugin` (`kubectl topoplace`), `cluster_flags` (--kubeconfig, --node-name)."""
