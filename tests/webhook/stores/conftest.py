"""The stores' tests start the real HTTPS webhook too: the server's fixtures."""

from tests.webhook.server.conftest import client, policy_dir, server, tls_files

__all__ = ["client", "policy_dir", "server", "tls_files"]
