"""Helm for the chart's checks: the binary `e2e/build-helm.sh` caches, run with its state
kept out of the user's home, and the post-renderer that makes a release fit the local cluster."""
