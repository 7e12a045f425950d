"""One pass of the certificate sidecar: Secret → tls.crt/tls.key → caBundle.

The decisions (keep, renew, new CA; what to write) are pure functions in
webhook/certs/bootstrap.py; this module does the API calls and file writes around them, with
optimistic concurrency on the Secret so every replica ends up serving one pair.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

    from webhook.certs.bootstrap import Action, StoredMaterial

__all__ = ["CertSync", "ConflictStorm", "PassResult", "Settings", "WebhookConfigMissing"]

log = logging.getLogger("topoplace.certs")

# Writers racing on the Secret: one of them wins each round, so a few rounds always suffice.
_MAX_WRITE_ROUNDS = 5


@dataclass(frozen=True, slots=True)
class Settings:
    namespace: str
    secret: str
    service: str
    webhook_config: str
    out_dir: Path
    check_interval: float
    renew_before: dt.timedelta
    validity_days: int
    once: bool = False


@dataclass(frozen=True, slots=True)
class PassResult:
    """What one pass did, for logs and tests."""

    action: Action
    reason: str
    wrote_secret: bool
    wrote_files: bool
    patched_webhooks: int


class ConflictStorm(Exception):
    """The Secret changed under us on every round; retried like any transient failure."""


class WebhookConfigMissing(Exception):
    """The MutatingWebhookConfiguration does not exist (yet); retried."""


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class CertSync:
    """One pass of Secret → files → caBundle over a kubernetes-asyncio ApiClient."""

    def __init__(
        self,
        api: ApiClient,
        settings: Settings,
        *,
        clock: Callable[[], dt.datetime] = _utcnow,
    ) -> None:
        from kubernetes_asyncio import client

        self._api = api
        self._core = client.CoreV1Api(api)
        self._admission = client.AdmissionregistrationV1Api(api)
        self._settings = settings
        self._clock = clock

    async def sync_once(self) -> PassResult:
        material, action, reason, wrote_secret = await self._ensure_secret()
        wrote_files = self._write_files(material)
        patched = await self._ensure_ca_bundle(material)
        return PassResult(action, reason, wrote_secret, wrote_files, patched)

    async def _read_secret(self) -> Any:
        from kubernetes_asyncio.client.exceptions import ApiException

        s = self._settings
        try:
            return await self._core.read_namespaced_secret(s.secret, s.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def _ensure_secret(self) -> tuple[StoredMaterial, Action, str, bool]:
        from kubernetes_asyncio.client.exceptions import ApiException

        from webhook.certs import bootstrap as cb

        s = self._settings
        names = cb.service_dns_names(s.service, s.namespace)
        for _ in range(_MAX_WRITE_ROUNDS):
            secret = await self._read_secret()
            stored = cb.parse_secret_data(secret.data if secret is not None else None)
            now = self._clock()
            decision = cb.assess(stored, dns_names=names, now=now, renew_before=s.renew_before)
            if decision.action is cb.Action.KEEP and stored is not None:
                return stored, decision.action, decision.reason, False
            fresh = cb.issue(
                decision, stored, dns_names=names, now=now, validity_days=s.validity_days
            )
            existing = self._api.sanitize_for_serialization(secret) if secret else None
            body = cb.secret_manifest(existing, fresh, name=s.secret, namespace=s.namespace)
            try:
                if secret is None:
                    # kubernetes-asyncio serialises a plain dict body; its hints name only the model
                    await self._core.create_namespaced_secret(s.namespace, body)  # type: ignore[arg-type]
                else:  # carries the resourceVersion we read: a concurrent write gets 409
                    await self._core.replace_namespaced_secret(s.secret, s.namespace, body)  # type: ignore[arg-type]  # a dict body, as above
            except ApiException as exc:
                if exc.status == 409:
                    log.info(
                        "another replica wrote the secret first; re-reading it",
                        extra={"secret": s.secret},
                    )
                    continue
                raise
            log.info(
                "wrote a new serving certificate to the secret (%s): %s",
                decision.action.value,
                decision.reason,
                extra={"secret": s.secret, "namespace": s.namespace},
            )
            return fresh, decision.action, decision.reason, True
        raise ConflictStorm(f"secret {s.namespace}/{s.secret} changed on every write attempt")

    def _write_files(self, material: StoredMaterial) -> bool:
        from webhook.certs.keys import write_pair

        out = self._settings.out_dir
        out.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = out / "tls.crt", out / "tls.key"
        if _read_or_empty(cert_path) == material.serving.cert_pem and (
            _read_or_empty(key_path) == material.serving.key_pem
        ):
            return False
        write_pair(material.serving, cert_path, key_path)
        log.info("serving certificate written for serve to load", extra={"dir": str(out)})
        return True

    async def _ensure_ca_bundle(self, material: StoredMaterial) -> int:
        from kubernetes_asyncio.client.exceptions import ApiException

        from webhook.certs.bootstrap import ca_bundle, ca_bundle_patch

        name = self._settings.webhook_config
        try:
            config = await self._admission.read_mutating_webhook_configuration(name)
        except ApiException as exc:
            if exc.status == 404:
                raise WebhookConfigMissing(
                    f"MutatingWebhookConfiguration {name} not found"
                ) from exc
            raise
        plain = self._api.sanitize_for_serialization(config)
        ops = ca_bundle_patch(plain, ca_bundle(material, now=self._clock()))
        if not ops:
            return 0
        # kubernetes-asyncio accepts _content_type; its hints omit it
        await self._admission.patch_mutating_webhook_configuration(  # type: ignore[call-arg]
            name, ops, _content_type="application/json-patch+json"
        )
        count = len(ops) // 2  # a test op + a set op per webhook
        log.info("caBundle updated on %d webhook(s)", count, extra={"webhook_config": name})
        return count


def _read_or_empty(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""
