"""What both parts stand on: the contracts they share and the plumbing neither part owns.

Contracts: `vocabulary` (every node label key and the topology annotation), `kubelet_contract`
(the Topology Manager's policies and options), `node_resource_topology` (the NUMA capacity
object) and `cache_layout` (the dataset cache on disk). Plumbing: `cli` (the two command-line
entry points, the kubectl plugin and the flags that reach a cluster), `logsetup`/`logbatch`
(logging), `kube_config` (reaching the API server), `kube` (lists and watches as JSON, the one
list+watch loop both parts run, the API's error bodies), `http_site` (starting an aiohttp
server), `backoff` (retry pacing and the interruptible sleep), `k8s_names` (Kubernetes label
and name rules), `yaml_input` (bounded YAML reading).

Imports: nothing of `agent` or `webhook`; only the standard library and third-party packages.
"""
