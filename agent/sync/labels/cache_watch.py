"""Watch the dataset cache and poke the sync loop when a dataset version's completeness changes.

Only a few events matter (see `CacheFilter`): a `.topoplace-complete` marker appearing or
vanishing, a version or dataset directory disappearing or being moved in. Everything a
prefetch writes inside its temporary directory is ignored, and the rest is grouped by
watchfiles' debounce, so a download of thousands of files costs one reconcile.
The root may not exist yet (the first prefetch creates it): then it is polled for.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from watchfiles import Change, awatch

from common.backoff import Sleep
from common.cache_layout import LOCK_FILE, MARKER_FILE, TEMP_PREFIX

__all__ = ["CacheFilter", "watch_cache"]

log = logging.getLogger(__name__)


def _plain(name: str) -> bool:
    """A dataset or version name (not a temp dir, lock, marker or other hidden file)."""
    return not name.startswith(".") and not name.startswith(TEMP_PREFIX) and name != LOCK_FILE


@dataclass(frozen=True, slots=True)
class CacheFilter:
    """watchfiles filter: True for changes that can alter a `dataset.topoplace.io/` label."""

    root: Path

    def __call__(self, change: Change, path: str) -> bool:
        try:
            parts = Path(path).relative_to(self.root).parts
        except ValueError:
            return False
        if not parts:  # the root itself went away or came back
            return True
        if not all(_plain(p) for p in parts[:2]):
            return False
        depth = len(parts)
        if depth == 3:  # <name>/<version>/<file>: only the marker counts
            return parts[2] == MARKER_FILE
        if depth > 3:
            return False
        if change == Change.deleted:  # a dataset or version directory removed or moved away
            return True
        if change == Change.added:  # moved in whole: relevant only if it holds a marker
            here = self.root.joinpath(*parts)
            pattern = MARKER_FILE if depth == 2 else f"*/{MARKER_FILE}"
            return any(here.glob(pattern))
        return False


def _is_dir(path: Path) -> bool:
    # One stat(): cheap enough to do on the event loop.
    return path.is_dir()


async def _wait_for(root: Path, *, sleep: Sleep, poll_interval: float) -> None:
    logged = False
    while not _is_dir(root):
        if not logged:
            log.info("dataset cache root does not exist yet; waiting", extra={"root": str(root)})
            logged = True
        await sleep(poll_interval)


async def watch_cache(
    root: Path,
    on_change: Callable[[str], None],
    *,
    debounce_ms: int = 300,
    poll_interval: float = 2.0,
    stop: asyncio.Event | None = None,
    sleep: Sleep = asyncio.sleep,
) -> None:
    """Call `on_change(reason)` after each debounced group of relevant cache changes.

    Runs until `stop` is set (or the task is cancelled). If the root vanishes or cannot be
    watched, falls back to waiting for it; the sync loop's periodic resync covers the gap.
    """
    stop = stop or asyncio.Event()
    watch_filter = CacheFilter(root)
    while not stop.is_set():
        if not _is_dir(root):
            await _wait_for(root, sleep=sleep, poll_interval=poll_interval)
            # Anything already under the root appeared while nobody watched.
            on_change("dataset cache root appeared")
        try:
            async for changes in awatch(
                root,
                watch_filter=watch_filter,
                debounce=debounce_ms,
                step=50,
                stop_event=stop,
                rust_timeout=int(poll_interval * 1000),
                yield_on_timeout=True,
                recursive=True,
            ):
                if changes:
                    paths = sorted(p for _, p in changes)
                    log.debug("dataset cache changed", extra={"paths": paths[:5]})
                    on_change(f"dataset cache changed ({len(paths)} paths)")
                if not _is_dir(root):
                    on_change("dataset cache root vanished")
                    break
        except (FileNotFoundError, OSError, RuntimeError) as exc:
            # e.g. the root removed between the check and the watch, or inotify limits.
            log.warning(
                "cannot watch the dataset cache; retrying",
                extra={"root": str(root), "error": str(exc)},
            )
            await sleep(poll_interval)
