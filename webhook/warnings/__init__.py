"""The admission warnings about where a mutated pod can go, decided and fitted in one place.

`placement` decides which fire and in what order (the node cache gathers the facts, `facts`;
the scheduler's Lease verdict comes from `webhook.scheduler`); `hardware` and `now` word them
as parts; `fit` makes every warning line the webhook sends, engine warnings included, within
the API server's 256 characters with `topoplace: ` counted, keeping the pointer to
`kubectl topoplace explain`.

Imports: `explain`, `policy` and the webhook wire formats. Imported by `server`. No I/O.
"""
