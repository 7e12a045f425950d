"""Keep the serving PolicySet in step with the policy directory (usually a ConfigMap volume).

Triggers: watchfiles events on the directory (debounced), plus a periodic content-hash
check because inotify on volume mounts is not always delivered. A reload loads the whole
directory; an invalid set is refused whole (every message logged, the error counted) and
the last good set keeps serving. The serving set lives in one attribute, replaced by a
single assignment, so a request reads either the old set or the new one, never a mixture.

The kubelet updates a ConfigMap volume by writing a new `..<timestamp>` directory,
renaming a `..data_tmp` symlink over `..data`, then adjusting the `DIR/*.yaml` symlinks
that point through `..data`. So policies are read from `DIR/..data/` when it exists, and a
load is accepted only if `..data` pointed at the same target before and after it: a swap in
the middle of reading the files cannot produce a mixed set.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from common.yaml_input import POLICY
from webhook.policy.loader import PolicyLoadError, PolicySet, load_policy_dir

__all__ = ["PolicyStore", "PolicyWatcher", "ReloadResult", "load_consistent"]

logger = logging.getLogger(__name__)

_DATA_LINK = "..data"
_ATTEMPTS = 3


class PolicyStore:
    """The serving policy set. Readers take `store.current` once per request."""

    __slots__ = ("current",)

    def __init__(self, initial: PolicySet | None = None) -> None:
        self.current: PolicySet | None = initial


@dataclass(frozen=True, slots=True)
class ReloadResult:
    """What one reload attempt did: `swapped` a new set in, or `errors` refused it."""

    swapped: bool
    errors: tuple[str, ...] = ()


def _data_target(directory: Path) -> str | None:
    try:
        return os.readlink(directory / _DATA_LINK)
    except OSError:
        return None  # not a ConfigMap volume (or no ..data yet): plain directory


def _source(directory: Path) -> Path:
    """Where to read: `DIR/..data` on a ConfigMap volume, else DIR itself.

    Reading through `..data` sees the new generation's files all at once, even those whose
    user-visible symlink in DIR the kubelet has not created yet.
    """
    data = directory / _DATA_LINK
    return data if data.is_dir() else directory


def _fingerprint(directory: Path) -> str:
    """Cheap identity of what load_policy_dir would read: names and bytes of *.yaml."""
    h = hashlib.sha256()
    h.update((_data_target(directory) or "").encode())
    try:
        entries = sorted(p for p in _source(directory).glob("*.yaml") if not p.name.startswith("."))
    except OSError:
        return ""
    for path in entries:
        h.update(path.name.encode() + b"\0")
        try:
            # A policy file past its bound is refused at load; hashing its first bytes and
            # its size keeps each poll as cheap as the bound.
            with path.open("rb") as file:
                h.update(file.read(POLICY.max_bytes + 1))
            h.update(str(path.stat().st_size).encode())
        except OSError:
            h.update(b"<unreadable>")
        h.update(b"\0")
    return h.hexdigest()


def load_consistent(directory: Path) -> PolicySet:
    """load_policy_dir, retried while the kubelet swaps `..data` underneath the read."""
    for _ in range(_ATTEMPTS - 1):
        before = _data_target(directory)
        try:
            loaded = load_policy_dir(_source(directory))
        except PolicyLoadError:
            if _data_target(directory) != before:
                continue  # a read straddled a swap: errors may be artefacts, read again
            raise
        if _data_target(directory) == before:
            return loaded
    return load_policy_dir(_source(directory))


class PolicyWatcher:
    """Reloads `store` from `directory`: `load_initial()` once, then `watch()` as a task."""

    def __init__(
        self,
        directory: Path,
        store: PolicyStore,
        *,
        on_swap: Callable[[PolicySet], None] | None = None,
        on_error: Callable[[tuple[str, ...]], None] | None = None,
        debounce_ms: int = 100,
    ) -> None:
        self.directory = directory
        self.store = store
        self._on_swap = on_swap
        self._on_error = on_error
        self._debounce_ms = debounce_ms
        self._lock = asyncio.Lock()
        # Fingerprint of the content last acted on (loaded or refused): skip repeats.
        self._seen = ""

    def load_initial(self) -> PolicySet:
        """The startup load: raises PolicyLoadError (with every message) for an invalid set."""
        fingerprint = _fingerprint(self.directory)  # before loading: a later change differs
        loaded = load_consistent(self.directory)
        self._seen = fingerprint
        self.store.current = loaded
        if self._on_swap is not None:
            self._on_swap(loaded)
        return loaded

    async def reload(self, *, force: bool = False) -> ReloadResult:
        """Load the directory if its content changed since the last attempt."""
        async with self._lock:
            fingerprint = await asyncio.to_thread(_fingerprint, self.directory)
            if fingerprint == self._seen and not force:
                return ReloadResult(swapped=False)
            try:
                loaded = await asyncio.to_thread(load_consistent, self.directory)
            except PolicyLoadError as exc:
                return self._refused(fingerprint, tuple(exc.messages))
            except Exception as exc:
                # A loader bug refuses the set like bad input does: counted, one line, the
                # last good set serving, the same content not retried on every poll.
                return self._refused(fingerprint, (f"{type(exc).__name__}: {exc}",))
            self._seen = fingerprint
            current = self.store.current
            if current is not None and current.generation_hash == loaded.generation_hash:
                return ReloadResult(swapped=False)  # formatting-only change
            self.store.current = loaded  # the one atomic swap
            logger.info(
                "policy set loaded",
                extra={
                    "generation_hash": loaded.generation_hash,
                    "policies": ",".join(loaded.names),
                },
            )
            if self._on_swap is not None:
                self._on_swap(loaded)
            return ReloadResult(swapped=True)

    def _refused(self, fingerprint: str, errors: tuple[str, ...]) -> ReloadResult:
        self._seen = fingerprint
        logger.error(
            "policy set refused; the last good set keeps serving: %s",
            " | ".join(" ".join(message.split()) for message in errors),
            extra={"directory": str(self.directory), "errors": len(errors)},
        )
        if self._on_error is not None:
            self._on_error(errors)
        return ReloadResult(swapped=False, errors=errors)

    async def _reload_logged(self) -> None:
        try:
            await self.reload()
        except Exception:
            # Keep watching: one failed attempt must not stop every later reload.
            logger.exception(
                "policy reload failed unexpectedly", extra={"directory": str(self.directory)}
            )

    async def watch(
        self,
        poll_interval: float,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """File events plus a poll every `poll_interval` seconds, until cancelled."""
        events = asyncio.create_task(self._watch_events(), name="policy-events")
        try:
            while True:
                await sleep(poll_interval)
                await self._reload_logged()
        finally:
            events.cancel()
            await asyncio.gather(events, return_exceptions=True)

    async def _watch_events(self) -> None:
        from watchfiles import awatch

        try:
            async for _changes in awatch(
                self.directory,
                watch_filter=None,
                debounce=self._debounce_ms,
                step=20,
                recursive=True,
            ):
                await self._reload_logged()
        except (OSError, RuntimeError) as exc:
            # e.g. inotify watch limit reached: the periodic poll still covers us.
            logger.warning(
                "file events unavailable for the policy directory; relying on polling",
                extra={"directory": str(self.directory), "error": str(exc)},
            )
