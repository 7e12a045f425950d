"""Audit: did placement work? Each running GPU container's kubelet assignment joined with the
topology into a verdict (`aligned`, `cpus-remote`, `shared-cpus`, `nic-far`, `memory-remote`,
`unknown`) and the reason.

`facts` gathers the inputs (reading through `sources`), `resolve`
maps device-plugin IDs to GPUs and NICs of this machine, `nics` judges GPU-to-NIC nearness
(bounding GPUs known only by NUMA node), `verdict` judges one container (pure),
`render` prints the table and the JSON document, `monitor` keeps `run`'s Prometheus series in
step (interval, socket recreation) and logs each failure once.

Measured locality (where each GPU pod's pages really are): `measure` reads each pod's cgroup
and processes through `sources`, `locality` judges a
pod against its GPUs' NUMA nodes (pure), `node_rates` turns the NUMA nodes' numastat counters
into recent remote shares, `probe` runs one pass of the three.

Imports: `discovery`, `sources` and `common`; never `sync` or `cli`.
"""
