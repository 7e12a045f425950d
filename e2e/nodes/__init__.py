"""The simulated nodes: each a real kubelet in its own mount namespace that sees one machine
(`view`), with our container runtime and device plugins (`devices`, e2e/go/kubernetes/node).
`specs` lists the machines of `make cluster`; `start` brings one up and down."""
