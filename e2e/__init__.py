"""A real Kubernetes cluster on 127.0.0.1 for end-to-end checks (`make cluster`, `make e2e`).

Rooms: `controlplane/` (etcd, API server, scheduler, controller-manager, PKI), `nodes/` (one
real kubelet per simulated machine, with our CRI runtime and device plugins from
`go/kubernetes/node`), `topoplace/` (Topoplace's own processes). `cluster` is the command (up,
down, status, nodes, add-node, remove-node, audit); `procs` starts and stops processes and
`kube` calls kubectl, both used by every room. All built from source by `build-bin.sh`.
Test code, not product code: the product packages never import it.
"""
