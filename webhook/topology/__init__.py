"""The placement model (pure: no I/O): what kube-scheduler's filters and the kubelet's
admission will do with a pod on a node. explain, the admission warnings, the scheduler
extender and the engine's node affinity all call it; nothing else models the kubelet.

- `requests`: what a pod asks for, summed once (scheduler) and what the kubelet aligns;
- `filters/`: kube-scheduler's filter rules (selectors, taints, the Node view);
- `kubelet`: the kubelet settings that decide NUMA admission, from labels or a
  NodeResourceTopology; `shape`: a node's NUMA shape and the capacity hint providers count;
- `merge`: the one Topology Manager merge; `admission`: it, for a pod on an idle node or a
  node now; `fit`: the free-capacity verdict the extender and explain's `numa-free` read;
- `shapes`: the node shapes whose kubelet admits a pod, as ORed affinity terms;
- `pairing`: GPU↔NIC partners per NUMA node from the agent's annotation; `zones`:
  NodeResourceTopology objects as records.

Imports: `policy`, the webhook wire formats and `common`.
"""
