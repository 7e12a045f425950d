"""What the mutation engine returns and the webhook-level settings it needs.

This is the one typed seam between transport (server, offline CLI) and logic (engine):
neither side imports the other's internals.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from common.cache_layout import DEFAULT_CACHE_ROOT, cache_root_problem
from webhook.policy.model import PlacementPolicy
from webhook.policy.quantity import QuantityError, parse_quantity

__all__ = [
    "DEFAULT_PREFETCH_IMAGE",
    "EngineSettings",
    "Mutation",
    "OnMissing",
    "add_engine_arguments",
    "grouped_warnings",
    "settings_from_args",
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


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """The engine's settings as flags, shared by `serve` and the offline `mutate`."""
    parser.add_argument(
        "--dataset-cache-root",
        type=Path,
        default=DEFAULT_CACHE_ROOT,
        metavar="DIR",
        help=f"node path of the dataset cache (default {DEFAULT_CACHE_ROOT}); a webhook "
        "setting, so policies cannot choose host paths: absolute, not /, and outside the "
        "system directories (/etc, /usr, /proc, /sys, /dev, /boot, /bin, /sbin, /lib*, /run, "
        "/var/run, /root, the kubelet's and the container runtimes' state)",
    )
    parser.add_argument(
        "--prefetch-image",
        default=DEFAULT_PREFETCH_IMAGE,
        metavar="IMAGE",
        help=f"image of the prefetch init container (default {DEFAULT_PREFETCH_IMAGE}); "
        "must not be empty",
    )
    parser.add_argument(
        "--dataset-cache-max-bytes",
        metavar="SIZE",
        help="a bound on each node's dataset cache (a quantity: 500Gi, 2T): the prefetch init "
        "containers evict least recently used versions no pod uses to stay under it "
        "(default: no bound, the cache grows until the disk is full)",
    )
    parser.add_argument(
        "--on-missing-policy",
        choices=["warn", "deny"],
        default="warn",
        help="a pod names a policy that is not loaded: admit it unchanged with a warning "
        "(default) or deny it",
    )


def settings_from_args(args: argparse.Namespace) -> EngineSettings | str:
    """EngineSettings from the flags, or a message saying what to fix."""
    problem = cache_root_problem(args.dataset_cache_root)
    if problem is not None:
        return f"--dataset-cache-root {args.dataset_cache_root}: {problem}"
    image = args.prefetch_image
    if not image or image != image.strip() or any(c.isspace() for c in image):
        return f"--prefetch-image {image!r}: expected an image such as {DEFAULT_PREFETCH_IMAGE}"
    bound = args.dataset_cache_max_bytes
    max_cache_bytes = None
    if bound is not None:
        try:
            amount = parse_quantity(bound)
        except QuantityError:
            amount = Decimal(0)
        if amount < 1 or amount != amount.to_integral_value():
            return f"--dataset-cache-max-bytes {bound!r}: expected a size in bytes such as 500Gi"
        max_cache_bytes = int(amount)
    return EngineSettings(
        cache_root=args.dataset_cache_root,
        prefetch_image=args.prefetch_image,
        max_cache_bytes=max_cache_bytes,
        on_missing_policy=args.on_missing_policy,
    )


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
