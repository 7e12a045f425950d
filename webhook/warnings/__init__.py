"""The admission warnings about where a mutated pod can go, decided and worded in one place.

`placement` is the one fit evaluation at admission: it reads the node store and the NUMA
zones as plain stores, decides which warnings fire and in what order (`facts` asks the
node-fit engine one fact at a time; the scheduler's Lease verdict comes from
`webhook.scheduler`); `hardware` and `now` word them as parts; `lines` makes every warning
line the webhook sends, engine warnings included, within the API server's 256 characters
with `topoplace: ` counted, keeping the pointer to `kubectl topoplace explain`; `kinds`
names each for the metric.

Imports: `nodefit`, `placement_model`, `policy` and the webhook wire formats. Imported by
`server`. No I/O.
"""
