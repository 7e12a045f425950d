"""The certificate bootstrap's decisions, without an API server."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from cryptography import x509

from webhook.certs import bootstrap as cb
from webhook.certs.keys import KeyPair, make_ca, make_serving_cert

NAMES = cb.service_dns_names("topoplace-webhook", "topoplace-system")
NOW = dt.datetime.now(dt.UTC)
MONTH = dt.timedelta(days=30)


def material(*, ca_days: int = 3650, serving_days: int = 365, names=NAMES) -> cb.StoredMaterial:
    ca = make_ca(days=ca_days)
    return cb.StoredMaterial(ca=ca, serving=make_serving_cert(ca, names, days=serving_days))


def decide(stored: cb.StoredMaterial | None) -> cb.Decision:
    return cb.assess(stored, dns_names=NAMES, now=NOW, renew_before=MONTH)


def test_dns_names_cover_every_form_the_api_server_may_dial() -> None:
    assert NAMES == (
        "topoplace-webhook.topoplace-system.svc",
        "topoplace-webhook.topoplace-system.svc.cluster.local",
        "topoplace-webhook.topoplace-system",
        "topoplace-webhook",
    )


def test_fresh_material_is_kept() -> None:
    assert decide(material()).action is cb.Action.KEEP


@pytest.mark.parametrize("data", [None, {}, {"tls.crt": "!!not base64!!"}])
def test_missing_or_garbled_secret_gets_a_new_ca(data: dict[str, str] | None) -> None:
    assert decide(cb.parse_secret_data(data)).action is cb.Action.NEW_CA


def test_serving_cert_expiring_within_renew_window_is_renewed_with_the_same_ca() -> None:
    stored = material(serving_days=20)
    decision = decide(stored)
    assert decision.action is cb.Action.RENEW_SERVING
    assert "expires" in decision.reason
    fresh = cb.issue(decision, stored, dns_names=NAMES, now=NOW, validity_days=365)
    assert fresh.ca == stored.ca
    assert fresh.serving != stored.serving
    assert decide(fresh).action is cb.Action.KEEP
    # the caBundle the API server holds stays valid: no webhook config write needed
    assert cb.ca_bundle(fresh, now=NOW) == cb.ca_bundle(stored, now=NOW)


def test_serving_cert_expiring_after_the_window_is_kept() -> None:
    assert decide(material(serving_days=45)).action is cb.Action.KEEP


def test_ca_expiring_gets_a_new_ca_and_the_old_one_stays_trusted_until_it_expires() -> None:
    stored = material(ca_days=20, serving_days=10)
    decision = decide(stored)
    assert decision.action is cb.Action.NEW_CA
    fresh = cb.issue(decision, stored, dns_names=NAMES, now=NOW, validity_days=365)
    assert fresh.ca.cert_pem != stored.ca.cert_pem
    bundle = cb.ca_bundle(fresh, now=NOW)
    assert fresh.ca.cert_pem in bundle and stored.ca.cert_pem in bundle
    # once the old CA has expired it leaves the bundle
    later = NOW + dt.timedelta(days=21)
    assert cb.ca_bundle(fresh, now=later) == fresh.ca.cert_pem


def test_service_renamed_means_renewal() -> None:
    stored = material(names=("old-name.topoplace-system.svc",))
    decision = decide(stored)
    assert decision.action is cb.Action.RENEW_SERVING
    assert "topoplace-webhook.topoplace-system.svc" in decision.reason


def test_serving_cert_from_a_different_ca_is_replaced() -> None:
    stored = material()
    foreign = make_serving_cert(make_ca(), NAMES)
    decision = decide(cb.StoredMaterial(ca=stored.ca, serving=foreign))
    assert decision.action is cb.Action.RENEW_SERVING
    assert "not signed" in decision.reason


def test_key_not_matching_its_certificate_is_replaced() -> None:
    stored = material()
    other = make_serving_cert(stored.ca, NAMES)
    mixed = cb.StoredMaterial(ca=stored.ca, serving=KeyPair(stored.serving.cert_pem, other.key_pem))
    decision = decide(mixed)
    assert decision.action is cb.Action.RENEW_SERVING
    assert "key does not belong" in decision.reason


def test_ca_key_missing_means_new_ca() -> None:
    stored = material()
    broken = cb.StoredMaterial(ca=KeyPair(stored.ca.cert_pem, b""), serving=stored.serving)
    assert decide(broken).action is cb.Action.NEW_CA


def test_secret_data_round_trips_and_is_a_tls_secret_layout() -> None:
    stored = material()
    data = cb.secret_data(stored)
    assert set(data) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    assert base64.b64decode(data["tls.crt"]) == stored.serving.cert_pem
    assert cb.parse_secret_data(data) == stored


def test_issued_serving_cert_names_the_service_and_is_signed_by_the_ca() -> None:
    before = dt.datetime.now(dt.UTC)
    fresh = cb.issue(decide(None), None, dns_names=NAMES, now=before, validity_days=90)
    after = dt.datetime.now(dt.UTC)
    cert = x509.load_pem_x509_certificate(fresh.serving.cert_pem)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(fresh.ca.cert_pem))
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert tuple(san.get_values_for_type(x509.DNSName)) == NAMES
    # X.509 times have whole seconds
    second = dt.timedelta(seconds=1)
    validity = dt.timedelta(days=90)
    assert before + validity - second <= cert.not_valid_after_utc <= after + validity


def _config(*bundles: str | None) -> dict:
    webhooks = []
    for i, bundle in enumerate(bundles):
        client_config: dict = {"service": {"name": "s", "namespace": "n", "path": "/mutate"}}
        if bundle is not None:
            client_config["caBundle"] = bundle
        webhooks.append({"name": f"w{i}.topoplace.io", "clientConfig": client_config})
    return {"metadata": {"name": "topoplace"}, "webhooks": webhooks}


def test_ca_bundle_patch_touches_only_webhooks_whose_bundle_differs() -> None:
    bundle = b"-----BEGIN CERTIFICATE-----\n...\n"
    wanted = base64.b64encode(bundle).decode()
    ops = cb.ca_bundle_patch(_config(wanted, None, "c3RhbGU="), bundle)
    assert ops == [
        {"op": "test", "path": "/webhooks/1/name", "value": "w1.topoplace.io"},
        {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": wanted},
        {"op": "test", "path": "/webhooks/2/name", "value": "w2.topoplace.io"},
        {"op": "add", "path": "/webhooks/2/clientConfig/caBundle", "value": wanted},
    ]
    assert cb.ca_bundle_patch(_config(wanted, wanted), bundle) == []


def test_secret_manifest_keeps_what_others_put_on_an_existing_secret() -> None:
    existing = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "tls",
            "namespace": "ns",
            "resourceVersion": "42",
            "annotations": {"backup.example.com/skip": "true"},
            "managedFields": [{"manager": "kubectl"}],
        },
        "type": "Opaque",  # immutable: a replace must keep it
        "data": {"old": "eA=="},
    }
    body = cb.secret_manifest(existing, material(), name="tls", namespace="ns")
    assert body["metadata"]["resourceVersion"] == "42"  # the replace is conditional
    assert body["metadata"]["annotations"] == {"backup.example.com/skip": "true"}
    assert "managedFields" not in body["metadata"]
    assert body["type"] == "Opaque"
    assert set(body["data"]) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    assert existing["data"] == {"old": "eA=="}  # the input is not modified


def test_secret_manifest_for_a_new_secret_is_a_valid_tls_secret() -> None:
    from tests.kube import assert_valid

    body = cb.secret_manifest(None, material(), name="tls", namespace="ns")
    assert body["type"] == "kubernetes.io/tls"
    assert "resourceVersion" not in body["metadata"]
    assert_valid(body)
