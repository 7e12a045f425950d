"""Free capacity per NUMA node, from NodeResourceTopology objects (pure: no I/O)."""
