"""Topoplace admission webhook: placement policies, the mutation engine and its HTTPS server.

Rooms, top to bottom (each may import the rooms below it and `common`, never one above):
`cli` (the commands) → `server` (HTTPS admission) and `certs` (serving certificate and
caBundle) → `workloads` (pod templates inside Jobs, Deployments, JobSets…) → `engine` (the
mutation recipe and its steps) → `policy` (the PlacementPolicy model and loader) → the wire
formats here: `vocabulary` (the pod label and annotations), `jsonio`, `yaml_io`.
The layers are checked by tests/test_layers.py from the contracts in pyproject.toml.
"""
