"""The mutation engine's settings as flags, shared by `serve`, `explain` and the offline
`mutate`, and the EngineSettings they make. The engine takes only the typed settings.
"""

from __future__ import annotations

import argparse
from decimal import Decimal
from pathlib import Path

from common.cache_layout import DEFAULT_CACHE_ROOT, cache_root_problem
from webhook.engine.outcome import DEFAULT_PREFETCH_IMAGE, EngineSettings
from webhook.policy.quantity import QuantityError, parse_quantity

__all__ = ["add_engine_arguments", "settings_from_args"]


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
