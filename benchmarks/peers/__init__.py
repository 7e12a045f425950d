"""Peers of our webhook for `make bench-e2e` only: the same patch written by a
MutatingAdmissionPolicy (CEL in the API server) and by Kyverno's admission controller."""
