"""Why not here: which nodes a (mutated) pod fits, and in topology words why the others don't.

Pure functions over plain dicts, kube-scheduler's filter semantics re-stated: `selectors`
(node selector requirements and terms, ORed; nodeSelector; preferred-term scores),
`tolerations` (taints against tolerations), `requests` (what the pod asks for, as the
scheduler adds it up, and what a node offers), `nodes` (the parts of a Node that matter),
`checks` (the ordered checks one pod makes on a node), `reasons` (the words, derived from the
label contract in common/vocabulary.py and the policy), `pairs` (whether the GPU↔NIC pairs a
policy asks for are guaranteed on the node's path), `verdict` (one verdict per node and the
summary), `index` (bit masks over many nodes, for the webhook's node cache), `render`
(table and JSON). The admission warnings built on these live in `webhook.warnings`.

Imports: `engine` (the policy's own affinity expressions), `policy`, the webhook wire formats
and `common`. No I/O. Imported by `warnings`, `server` and `cli`.
"""
