"""The node-fit engine: does a (mutated) pod fit a node, and if not, which check fails first,
in topology words. `explain`, the admission warnings and the scheduler extender's reasons
all stand on it.

- `checks`: the ordered checks one pod makes on a node (kube-scheduler's filter order, then
  the kubelet), and the pod's `PodPlan`;
- `node_verdict`: one node's verdict (`evaluate`, `failure`); `explanation`: every node's,
  mutating the pod first (`explain_pod`, the whole of `explain` without I/O);
- `kubelet_check`, `free_check`, `pairs_check`: the checks that stand on the placement model
  (the kubelet's admission on the hardware, on what is free now; the GPU↔NIC pairs);
- `node_index` and `node_masks`: the same checks over many nodes as bit masks (the node
  store); `node_groups`: nodes alike for one pod, judged once per group;
- `domains`: per domain of a keepTogether level; `reasons`: the words, from the label
  contract (common/vocabulary.py) and the policy.

What kube-scheduler and the kubelet do is modelled once, in webhook/placement_model/;
explain's output is webhook/cli/explain/; the admission warnings are webhook/warnings/.

Imports: `engine` (to mutate as the webhook would), `placement_model`, `policy`, the webhook
wire formats and `common`. No I/O.
"""
