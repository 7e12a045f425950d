"""What the mutation engine returns and the webhook-level settings it needs.

This is the one typed seam between transport (server, offline CLI) and logic (engine):
neither side imports the other's internals.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from common.cache_layout import DEFAULT_CACHE_ROOT
from webhook.policy.model import PlacementPolicy

__all__ = [
    "DEFAULT_PREFETCH_IMAGE",
    "EngineSettings",
    "Mutation",
    "OnMissing",
    "grouped_warnings",
]

DEFAULT_PREFETCH_IMAGE = "ghcr.io/topoplace/topoplace:0.1.0"
OnMissing = Literal["warn", "deny"]


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Settings of the webhook, never of a policy: policies cannot choose host paths.

    `on_missing_policy` answers a pod naming a policy that is not loaded (there is no policy
    whose `onMissing` could say): warn admits it unchanged with a warning, deny refuses it.
    """

    cache_root: Path = DEFAULT_CACHE_ROOT
    prefetch_image: str = DEFAULT_PREFETCH_IMAGE
    # The prefetchers' `--max-cache-bytes`: evict other versions to stay under it (None: the
    # cache grows until the disk is full).
    max_cache_bytes: int | None = None
    on_missing_policy: OnMissing = "warn"
    claim_templates: Callable[[str, str], bool | None] | None = None
    """Whether ResourceClaimTemplate (namespace, name) exists: True, False, or None for
    "cannot tell". None (the default, and what `serve` uses): trust that the claim-templates
    command made every template the DRA policies want."""


@dataclass(frozen=True, slots=True)
class Mutation:
    """The engine's verdict on one pod.

    allowed=False only when a policy says `onMissing: deny`; then `denial` explains why.
    `patch` is RFC 6902 against the input pod; empty for pass-through or an already-mutated pod.
    `policy` is the policy name the pod asked for (None when the pod did not opt in);
    `applied` the policy the engine applied to it (None: none was, for whatever reason), so
    whoever judges the mutated pod next (the placement warnings, explain) takes it from here
    and never reads our annotation back.
    """

    pod: dict[str, Any]
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    allowed: bool = True
    denial: str | None = None
    policy: str | None = None
    applied: PlacementPolicy | None = None
    written: str | None = None
    """`patch` as an AdmissionResponse carries it (base64 of its JSON), where already written:
    a replay writes its patch once for every pod of its form (engine/replay)."""


_PER_CONTAINER = re.compile(r"^(worker container|container) (\S+): (.+)$")
_NAMED = 3  # containers named in a grouped warning; the count says the rest


def grouped_warnings(warnings: Sequence[str]) -> list[str]:
    """The same per-container warning once, naming a few containers and counting them all: a
    pod of 200 containers without resources gets one line, not 199. Order of first showing."""
    names: dict[tuple[str, str], list[str]] = {}
    out: list[str | tuple[str, str]] = []
    for warning in warnings:
        match = _PER_CONTAINER.match(warning)
        if match is None:
            out.append(warning)
            continue
        key = (match.group(1), match.group(3))
        if key not in names:
            names[key] = []
            out.append(key)
        names[key].append(match.group(2))
    return [item if isinstance(item, str) else _group(*item, names[item]) for item in out]


def _group(what: str, text: str, containers: list[str]) -> str:
    if len(containers) == 1:
        return f"{what} {containers[0]}: {text}"
    shown = ", ".join(containers[:_NAMED])
    more = f" and {len(containers) - _NAMED} more" if len(containers) > _NAMED else ""
    return f"{len(containers)} {what}s ({shown}{more}): {text}"
