"""What both parts stand on: the contracts they share and the plumbing neither part owns.

Contracts: `vocabulary` (every node label key and the topology annotation) and `cache_layout`
(the dataset cache on disk). Plumbing: `subcommands` and `logsetup` (the two command-line
entry points), `kube_config` and `cluster_flags` (reaching the API server), `kube` (lists and
watches as JSON, and `kube.listwatch`, the one list+watch loop both parts run), `backoff`
(retry pacing), `k8s_names` (Kubernetes label and name rules).

Imports: nothing of `agent` or `webhook`; only the standard library and third-party packages.
"""
