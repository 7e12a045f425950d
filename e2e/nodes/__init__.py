"""The simulated nodes: each a real kubelet in its own mount namespace that sees one machine
(`view`), with our container runtime and device plugins (`devices`, e2e/go/kubernetes/node).
`specs` lists the machines of `make cluster`, `kubelet` writes a kubelet's config and command
line, `start` brings one node up and down, `fleet` all of them (and checks the host paths a
kubelet may write), `manage` is the nodes / add-node / remove-node / audit commands."""
