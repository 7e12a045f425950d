"""Topoplace node agent: hardware discovery, node label sync and dataset prefetch.

Rooms, top to bottom (each may import the rooms below it and `common`, never one above):
`cli` (the commands) → `sync` (keeping the Node labels in step with the hardware and cache)
→ `audit` (each running GPU container's kubelet assignment judged against the topology)
→ `discovery` (topology, links, labels, table) and `cache` (the dataset cache: lock,
eviction, prefetch) → `sources` (raw facts read from sysfs, NVML, the kubelet config and
PodResources API, and the cache markers). The layers are checked by tests/test_layers.py.
"""
