"""The mutation engine: pure functions from (pod, namespace, policies) to a Mutation.

`recipe` is the whole recipe in order; `pod_fields` checks the fields the steps edit first,
and says which containers are the training workers. One module per step: `resources` (which
code decides Guaranteed QoS), `affinity` (required and preferred node affinity on the agent
labels), `dra` (ResourceClaims), `datasets` (the cache volume, mounts and prefetch init
container), `launcher` (torchrun `--numa-binding`), `env`, `scheduler` (schedulerName),
`lone_pod` (keepTogether seen from one pod). `patch` diffs the result into an RFC 6902
patch; `outcome` holds the result type (with the policy applied) and the webhook-level
settings. `replay/` records the recipe's answer for a pod form and replays it for the form's
later pods, with no step run (what `serve` calls; the offline commands call the recipe).

Imports: `placement_model`, `policy`, the webhook wire formats and `common`. No I/O.
"""
