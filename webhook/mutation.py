"""What the mutation engine returns and the webhook-level settings it needs.

This is the one typed seam between transport (server, offline CLI) and logic (engine):
neither side imports the other's internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.cache_layout import DEFAULT_CACHE_ROOT

__all__ = ["DEFAULT_PREFETCH_IMAGE", "EngineSettings", "Mutation"]

DEFAULT_PREFETCH_IMAGE = "ghcr.io/topoplace/topoplace:0.1.0"


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Settings of the webhook, never of a policy: policies cannot choose host paths."""

    cache_root: Path = DEFAULT_CACHE_ROOT
    prefetch_image: str = DEFAULT_PREFETCH_IMAGE


@dataclass(frozen=True, slots=True)
class Mutation:
    """The engine's verdict on one pod.

    allowed=False only when a policy says `onMissing: deny`; then `denial` explains why.
    `patch` is RFC 6902 against the input pod; empty for pass-through or an already-mutated pod.
    `policy` is the policy name the pod asked for (None when the pod did not opt in).
    """

    pod: dict[str, Any]
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    allowed: bool = True
    denial: str | None = None
    policy: str | None = None
