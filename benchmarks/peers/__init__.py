"""Peers of our webhook: the same patch written by a MutatingAdmissionPolicy (CEL in the API
server), by Kyverno's admission controller, and by bare servers with nothing but the patch
(`bare_server`, aiohttp, answering what `floor` builds), the floor of `make bench` and
`make bench-e2e`."""
