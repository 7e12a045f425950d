"""Workload documents: where a Pod template sits inside a Job, Deployment, JobSet, PyTorchJob…

`templates` finds and replaces the pod templates of each kind; `documents` mutates every one
of them in a multi-document YAML stream, as `topoplace-webhook mutate` does offline.

Imports: `engine`, `policy`, the webhook wire formats and `common`.
"""
