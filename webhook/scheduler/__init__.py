"""The scheduler extender kube-scheduler calls (filter, prioritize) over the NUMA nodes' free
capacity, the NodeResourceTopology watch it reads, and whether a named scheduler runs."""
