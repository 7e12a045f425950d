"""The agent's benchmarks: discovery, label sync, the locality audit, and dataset prefetch
(alone and next to the fastest S3 copiers)."""
