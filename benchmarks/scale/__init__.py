"""`make bench-scale`: Topoplace at fleet size on the real API server (issue 34).

A real etcd, kube-apiserver and kube-controller-manager (without the node-lifecycle and
taint-eviction controllers, so Nodes with no kubelet stay Ready, as scheduler_perf runs),
N simulated Nodes with a NodeResourceTopology each (`fleet.py`), the real webhook as a host
process (`stack.py`), two stock kube-schedulers (the default profile, and the NUMA-aware one
of manifests/overlays/numa-scheduler with its extender), and the measurements (`measure.py`).
"""
