"""Server TLS with key-pair hot reload (cert-manager rotation, Secret volume updates).

Secret volumes give no reliable file events (the kubelet swaps a `..data` symlink, and
some runtimes only touch the target), so the reloader compares a content hash of the
certificate and key files on a timer. A new pair is loaded into a *fresh* SSLContext; the
listening context's SNI callback then hands each new handshake the current one. Existing
connections keep the context they were accepted with, so nothing is dropped. A pair that
does not load (half-rotated: new cert, old key) keeps the old context and is retried on the
next tick.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

__all__ = ["TLS_READ_BUFFER_BYTES", "TlsReloader", "limit_tls_read_buffers", "make_server_context"]

logger = logging.getLogger(__name__)

# asyncio's TLS protocol gives every connection a zero-filled read buffer of
# `SSLProtocol.max_size` bytes (256 KiB in CPython 3.11-3.13): 64 MB resident at 256
# keep-alive connections from API server replicas. A TLS record is at most 16 KiB, so a
# smaller buffer only means more, still large, reads of a big request body.
TLS_READ_BUFFER_BYTES = 32 * 1024


def limit_tls_read_buffers(size: int = TLS_READ_BUFFER_BYTES) -> None:
    """Shrink asyncio's per-connection TLS read buffer for this whole process.

    A process-wide class setting, so only the `serve` command calls it, before listening.
    """
    from asyncio import sslproto

    if getattr(sslproto.SSLProtocol, "max_size", 0) > size:
        sslproto.SSLProtocol.max_size = size


def make_server_context(cert_path: Path, key_path: Path) -> ssl.SSLContext:
    """A server-side context with TLS >= 1.2 serving `cert_path` (chain) and `key_path`.

    Raises ssl.SSLError or OSError when the pair cannot be loaded or does not match.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=cert_path, keyfile=key_path)
    return context


def _digest(cert_path: Path, key_path: Path) -> str:
    h = hashlib.sha256()
    for path in (cert_path, key_path):
        data = path.read_bytes()
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


class TlsReloader:
    """Owns the listening SSLContext and swaps the serving one when the files change.

    Construct it at startup (a pair that fails to load then is a startup error), pass
    `listening` to the TCP site, and run `watch()` as a background task.
    """

    def __init__(
        self,
        cert_path: Path,
        key_path: Path,
        *,
        on_reload: Callable[[bool], None] | None = None,
    ) -> None:
        self.cert_path = cert_path
        self.key_path = key_path
        self._on_reload = on_reload
        self._digest = _digest(cert_path, key_path)
        self._failed = ""
        self.listening = make_server_context(cert_path, key_path)
        self.current = self.listening
        self.listening.sni_callback = self._pick_context

    def _pick_context(
        self, ssl_object: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext
    ) -> None:
        # Called for every ClientHello, with or without SNI: send it to the newest pair.
        if self.current is not context:
            ssl_object.context = self.current

    @property
    def ready(self) -> bool:
        return True  # a reloader only exists once a valid pair has loaded

    def check(self) -> bool:
        """Reload if the files' content changed; True when a new pair is now served."""
        try:
            digest = _digest(self.cert_path, self.key_path)
        except OSError as exc:
            logger.warning(
                "cannot read TLS key pair; keeping the current one",
                extra={"error": str(exc), "cert": str(self.cert_path)},
            )
            return False
        if digest == self._digest:
            return False
        try:
            fresh = make_server_context(self.cert_path, self.key_path)
        except (OSError, ssl.SSLError) as exc:
            # Usually a rotation caught halfway. The digest is not recorded, so the next tick
            # retries even unchanged bytes (the files may have moved between hash and load);
            # it is reported once per content.
            if digest != self._failed:
                self._failed = digest
                logger.warning(
                    "new TLS key pair does not load; keeping the current one and retrying",
                    extra={"error": str(exc), "cert": str(self.cert_path)},
                )
                if self._on_reload is not None:
                    self._on_reload(False)
            return False
        self.current = fresh
        self._digest = digest
        logger.info("TLS key pair reloaded", extra={"cert": str(self.cert_path)})
        if self._on_reload is not None:
            self._on_reload(True)
        return True

    async def watch(
        self,
        interval: float,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """Check every `interval` seconds until cancelled."""
        while True:
            await sleep(interval)
            self.check()
