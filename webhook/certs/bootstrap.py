"""Decisions of the in-cluster certificate bootstrap, free of I/O.

`topoplace-webhook certs` (webhook/cli/certs.py) reads the shared Secret and the
MutatingWebhookConfiguration; everything it decides — is the stored pair still good, what to
write instead, which `caBundle` fields to fix — is computed here from plain values, so the
rules are unit-tested without an API server.

Secret layout (type kubernetes.io/tls, so tools that know TLS secrets can read it):
`tls.crt`/`tls.key` the serving pair, `ca.crt`/`ca.key` the private CA that signs it, and,
for one CA lifetime after a CA rollover, `ca-previous.crt` so the caBundle still trusts
serving certificates a lagging replica may present.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime as dt
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from webhook.certs.keys import KeyPair, make_ca, make_serving_cert, not_after

__all__ = [
    "CA_CERT_KEY",
    "CA_KEY_KEY",
    "PREVIOUS_CA_KEY",
    "TLS_CERT_KEY",
    "TLS_KEY_KEY",
    "Action",
    "Decision",
    "StoredMaterial",
    "assess",
    "ca_bundle",
    "ca_bundle_patch",
    "issue",
    "parse_secret_data",
    "secret_data",
    "secret_manifest",
    "service_dns_names",
]

TLS_CERT_KEY = "tls.crt"
TLS_KEY_KEY = "tls.key"
CA_CERT_KEY = "ca.crt"
CA_KEY_KEY = "ca.key"
PREVIOUS_CA_KEY = "ca-previous.crt"

# The CA outlives many serving certificates, so renewals never touch the caBundle.
CA_VALIDITY_DAYS = 3650


@dataclass(frozen=True, slots=True)
class StoredMaterial:
    """What the Secret holds, base64-decoded; absent keys are empty bytes."""

    ca: KeyPair
    serving: KeyPair
    previous_ca_cert: bytes = b""


class Action(enum.Enum):
    KEEP = "keep"
    RENEW_SERVING = "renew-serving"  # new serving pair, same CA: caBundle unchanged
    NEW_CA = "new-ca"  # new CA and serving pair: caBundle changes


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: str


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """Names the API server (and in-cluster clients) may use; the first becomes the CN."""
    return (
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        f"{service}.{namespace}",
        service,
    )


def parse_secret_data(data: Mapping[str, str] | None) -> StoredMaterial | None:
    """Decode a Secret's `data` map; None when it is missing or not base64."""
    if not data:
        return None
    try:
        raw = {k: base64.b64decode(v, validate=True) for k, v in data.items()}
    except (binascii.Error, ValueError):
        return None
    return StoredMaterial(
        ca=KeyPair(raw.get(CA_CERT_KEY, b""), raw.get(CA_KEY_KEY, b"")),
        serving=KeyPair(raw.get(TLS_CERT_KEY, b""), raw.get(TLS_KEY_KEY, b"")),
        previous_ca_cert=raw.get(PREVIOUS_CA_KEY, b""),
    )


def secret_data(material: StoredMaterial) -> dict[str, str]:
    data = {
        TLS_CERT_KEY: material.serving.cert_pem,
        TLS_KEY_KEY: material.serving.key_pem,
        CA_CERT_KEY: material.ca.cert_pem,
        CA_KEY_KEY: material.ca.key_pem,
    }
    if material.previous_ca_cert:
        data[PREVIOUS_CA_KEY] = material.previous_ca_cert
    return {k: base64.b64encode(v).decode("ascii") for k, v in data.items()}


def secret_manifest(
    existing: Mapping[str, Any] | None,
    material: StoredMaterial,
    *,
    name: str,
    namespace: str,
) -> dict[str, Any]:
    """The Secret to write: the existing object with new data (its resourceVersion makes the
    replace conditional; its type, which is immutable, and its other metadata are kept), or a
    new kubernetes.io/tls Secret."""
    if existing is not None:
        body = copy.deepcopy(dict(existing))
    else:
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "kubernetes.io/tls",
        }
    body["metadata"].pop("managedFields", None)  # the API server maintains them
    body["metadata"].setdefault("labels", {})["app.kubernetes.io/name"] = "topoplace-webhook"
    body["data"] = secret_data(material)
    body.pop("stringData", None)
    return body


def _pair_problem(pair: KeyPair, what: str) -> tuple[x509.Certificate | None, str | None]:
    """Load a pair; say what is wrong with it, if anything."""
    if not pair.cert_pem or not pair.key_pem:
        return None, f"{what} certificate or key missing"
    try:
        cert = x509.load_pem_x509_certificate(pair.cert_pem)
        key = serialization.load_pem_private_key(pair.key_pem, password=None)
    except ValueError:
        return None, f"{what} certificate or key is not valid PEM"
    if cert.public_key() != key.public_key():
        return None, f"{what} key does not belong to its certificate"
    return cert, None


def _expiring(cert: x509.Certificate, now: dt.datetime, renew_before: dt.timedelta) -> bool:
    return cert.not_valid_after_utc - renew_before <= now


def _missing_names(cert: x509.Certificate, dns_names: Sequence[str]) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return list(dns_names)
    present = set(san.get_values_for_type(x509.DNSName))
    return [n for n in dns_names if n not in present]


def assess(
    stored: StoredMaterial | None,
    *,
    dns_names: Sequence[str],
    now: dt.datetime,
    renew_before: dt.timedelta,
) -> Decision:
    """Is the stored material still fit to serve until the next check, and if not, why."""
    if stored is None:
        return Decision(Action.NEW_CA, "secret holds no certificates yet")
    ca_cert, problem = _pair_problem(stored.ca, "CA")
    if ca_cert is None:
        return Decision(Action.NEW_CA, problem or "CA unusable")
    if _expiring(ca_cert, now, renew_before):
        return Decision(Action.NEW_CA, f"CA expires {ca_cert.not_valid_after_utc:%Y-%m-%d}")
    serving_cert, problem = _pair_problem(stored.serving, "serving")
    if serving_cert is None:
        return Decision(Action.RENEW_SERVING, problem or "serving pair unusable")
    try:
        serving_cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return Decision(Action.RENEW_SERVING, "serving certificate not signed by the stored CA")
    missing = _missing_names(serving_cert, dns_names)
    if missing:
        return Decision(Action.RENEW_SERVING, "serving certificate lacks " + ", ".join(missing))
    if _expiring(serving_cert, now, renew_before):
        expiry = serving_cert.not_valid_after_utc
        return Decision(Action.RENEW_SERVING, f"serving certificate expires {expiry:%Y-%m-%d}")
    return Decision(Action.KEEP, "valid")


def issue(
    decision: Decision,
    stored: StoredMaterial | None,
    *,
    dns_names: Sequence[str],
    now: dt.datetime,
    validity_days: int,
    ca_validity_days: int = CA_VALIDITY_DAYS,
) -> StoredMaterial:
    """New material for a RENEW_SERVING or NEW_CA decision (KEEP returns `stored`)."""
    if decision.action is Action.KEEP and stored is not None:
        return stored
    if decision.action is Action.RENEW_SERVING and stored is not None:
        ca = stored.ca
        previous = stored.previous_ca_cert if _still_valid(stored.previous_ca_cert, now) else b""
    else:
        ca = make_ca(days=ca_validity_days)
        previous = b""
        # Keep trusting the outgoing CA while it is still valid: a replica that has not yet
        # picked up the new pair keeps presenting a certificate signed by it.
        if stored is not None and _still_valid(stored.ca.cert_pem, now):
            previous = stored.ca.cert_pem
    serving = make_serving_cert(ca, dns_names, days=validity_days)
    return StoredMaterial(ca=ca, serving=serving, previous_ca_cert=previous)


def _still_valid(cert_pem: bytes, now: dt.datetime) -> bool:
    try:
        return not_after(cert_pem) > now
    except ValueError:
        return False


def ca_bundle(material: StoredMaterial, *, now: dt.datetime) -> bytes:
    """PEM the API server should trust: the current CA, plus the previous one while valid."""
    bundle = material.ca.cert_pem
    if material.previous_ca_cert and _still_valid(material.previous_ca_cert, now):
        bundle += material.previous_ca_cert
    return bundle


def ca_bundle_patch(config: Mapping[str, Any], bundle: bytes) -> list[dict[str, Any]]:
    """RFC 6902 ops that set `caBundle` on every webhook whose bundle differs.

    A merge patch would replace the whole `webhooks` list, so each op addresses one index,
    guarded by a `test` of that webhook's name: if someone reorders the list between our read
    and our patch, the patch fails as a whole instead of writing into the wrong entry.
    """
    wanted = base64.b64encode(bundle).decode("ascii")
    ops: list[dict[str, Any]] = []
    for index, webhook in enumerate(config.get("webhooks") or []):
        client_config = webhook.get("clientConfig") or {}
        if client_config.get("caBundle") == wanted:
            continue
        ops.append({"op": "test", "path": f"/webhooks/{index}/name", "value": webhook["name"]})
        ops.append(
            {
                "op": "add",  # `add` on an object member sets it whether or not it exists
                "path": f"/webhooks/{index}/clientConfig/caBundle",
                "value": wanted,
            }
        )
    return ops
