"""Label sync: keep this Node's owned labels and annotation equal to what discovery finds.

`loop` decides when to reconcile (start, resync, cache events), `node_diff` computes the merge
patch over owned keys only (pure), `node_client` reads and patches the Node, `cache_watch`
turns completion markers into events, `pod_watch` keeps dataset leases for the node's pods,
`health` serves /healthz, /readyz and /metrics.

Imports: `discovery`, `cache`, `sources` and `common`; never `cli`.
"""
