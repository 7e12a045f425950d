"""Topoplace admission webhook: placement policies, the mutation engine and its HTTPS server."""
