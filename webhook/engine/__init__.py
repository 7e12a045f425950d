"""The mutation engine: pure functions from (pod, namespace, policies) to a Mutation.

`recipe` is the whole recipe in order; `pod_shape` checks the fields the steps edit first.
One module per step: `workers` (which containers get GPUs), `resources` (which code decides
Guaranteed QoS), `affinity` (required and preferred node affinity on the agent labels),
`datasets` (the cache volume, mounts and prefetch init container), `launcher` (torchrun
`--numa-binding`), `env`. `patch` diffs the result into an RFC 6902 patch; `mutation` holds
the result type and the webhook-level settings.

Imports: `policy`, the webhook wire formats and `common`. No I/O.
"""
