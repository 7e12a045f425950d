"""A real Kubernetes control plane on 127.0.0.1 for end-to-end checks (`make cluster`, `make e2e`).

etcd, kube-apiserver, kube-scheduler and kube-controller-manager, built from source by
`build-bin.sh`; no kubelet. Simulated nodes are registered as a kubelet and device plugins
would register them, and Topoplace's own processes run as the manifests run them.
`cluster` is the command (up, down, status); `pki` makes the certificates, `procs` starts and
stops processes, `nodes` describes the simulated machines, `pods` turns a manifest container
into a local command line, `projector` projects a ConfigMap as the kubelet does.
Test code, not product code: the product packages never import it.
"""
