"""What the running agent keeps in step with the cluster, one room per concern.

- `labels`: this Node's owned labels and annotation equal to what discovery finds (`loop`
  decides when, `node_diff` computes the merge patch over owned keys only (pure),
  `node_client` reads and patches the Node, `cache_watch` turns completion markers into pokes);
- `leases`: the dataset versions this node's pods mount, leased from the pod watch;
- `pod_events`: what the same pod watch counts once per pod (kubelet refusals, prefetches);
- `health`: /healthz, /readyz and /metrics.

Imports: `discovery`, `cache`, `sources` and `common`; never `cli`.
"""
