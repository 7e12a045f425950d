"""The placement model (pure: no I/O): what kube-scheduler's filters and the kubelet's
admission will do with a pod on a node. The node-fit engine, the admission warnings, the
scheduler extender and the engine's node affinity all call it; nothing else models the
kubelet. To change a Topology Manager rule, edit `merge` (and `kubelet` for its settings).

- `requests`: what a pod asks for, summed once (scheduler) and what the kubelet aligns;
- `filters/`: kube-scheduler's filter rules (selectors, taints, the Node view, the minimal
  form of node selector terms);
- `kubelet`: the kubelet settings that decide NUMA admission, from labels or a
  NodeResourceTopology (names and defaults from common/kubelet_contract.py); `numa_shape`:
  a node's NUMA shape and the capacity the hint providers count;
- `merge`: the one Topology Manager merge; `kubelet_admission`: it, for a pod on an idle
  node or a node now; `free_now`: the free-capacity verdict the extender and the node-fit
  engine's `numa-free` check read;
- `shape_terms`: the node shapes whose kubelet admits a pod, as ORed affinity terms;
- `pairing`: GPU↔NIC partners per NUMA node from the agent's annotation; `zones`:
  NodeResourceTopology objects as records; `levels` and `span`: network levels and hops.

Imports: `policy`, the webhook wire formats and `common`.
"""
