"""Replay: the engine's answer for one pod form, recorded and replayed for the pods of that
form (issue 47).

A Job's replicas differ in their names, labels and the literal values of their environment,
never in what the engine reads. `form` says what it reads (the pod's form, a key) and whether
an answer holds for every pod of that form; `replayer` records the answers, per policy set,
and writes a later pod's patch and result from its form's recording: no step runs, no copy of
the whole pod, no diff; `patch_steps` applies a recorded patch to another pod of the form.
The engine (`recipe.mutate`) stays the one model of the steps: a form not seen twice yet, or
a pod with no form, goes to it.
"""
