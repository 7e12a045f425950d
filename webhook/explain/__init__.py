"""Why not here: which nodes a (mutated) pod fits, and in topology words why the others don't.

The feature only: `checks` (the ordered checks one pod makes on a node), `verdict` (one
verdict per node and the summary), `reasons` (the words, derived from the label contract in
common/vocabulary.py and the policy), `render` (table and JSON), and the checks that stand on
the placement model: `kubelet` (the kubelet's admission on the node's hardware), `free`
(its admission on what is free now), `pairs` (whether the GPU↔NIC pairs a policy asks for are
guaranteed on the node's path), `index` (the same checks over many nodes as bit masks, for
the webhook's node cache). What kube-scheduler and the kubelet do is modelled once, in
webhook/topology/; the admission warnings are made in webhook/warnings/.

Imports: `engine` (the policy's own affinity expressions), `topology`, `policy`, the webhook
wire formats and `common`. No I/O. Imported by `warnings`, `server` and `cli`.
"""
