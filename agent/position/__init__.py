"""The node's network position: which switch groups and which NVLink domain it belongs to.

Sources, each read apart from deriving: `fabric` (NVML's GPU fabric info: the NVLink domain),
`metadata` (a cloud's instance metadata, opt-in per provider) and `foreign` (labels other
tools already put on the node). `derive` turns them into the agent's own vocabulary
(`topoplace.io/network-tier-1..3`, `topoplace.io/nvlink-domain`) by pure functions; the sync
loop applies it to the labels it reads from the Node, so an existing label always wins.

Imports: `sources` (the NVML session) and `common`.
"""
