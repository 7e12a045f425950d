"""The documented bounds of a policy's numbers (docs/policies.md, "Bounds").

Every number a policy gives is multiplied by a pod's GPU count and written into the pod, so
each is finite and within what any node could hold; `validate` and `serve` refuse the rest
at load, so whatever they accept mutates every pod without an exception.
"""

from __future__ import annotations

from decimal import Decimal

__all__ = ["MAX_CPUS", "MAX_DEVICES", "MAX_MEMORY", "MIN_CPUS", "MIN_MEMORY_PER_GPU"]

MAX_DEVICES = 1024
"""Devices of one kind per GPU, GPUs or NICs per NUMA node: at most this many."""
MAX_CPUS = Decimal(8192)
"""CPUs: Linux's largest NR_CPUS, so more than any node holds."""
MIN_CPUS = Decimal("0.001")
"""CPUs: 1m, the smallest amount Kubernetes resolves."""
MAX_MEMORY = Decimal(64 * 1024**4)
"""Memory: 64Ti, more than the largest machines hold (32-48 TiB)."""
MIN_MEMORY_PER_GPU = Decimal(1024**2)
"""Memory: 1Mi per GPU (or per NUMA node share), less than any process needs."""
