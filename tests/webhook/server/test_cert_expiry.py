"""The serving certificate's expiry as a metric (issue 35): the notAfter of the file on disk,
a rotation seen at the next scrape, and no sample (never an error) while it is unreadable."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from webhook.certs.keys import make_ca, make_serving_cert, not_after
from webhook.server.cert_expiry import CertificateExpiry

NAME = "topoplace_webhook_tls_certificate_expiry_timestamp_seconds"


def _sample(registry: CollectorRegistry) -> float | None:
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith(NAME + " "):
            return float(line.split()[1])
    return None


def test_the_gauge_follows_the_certificate_file(tmp_path: Path) -> None:
    cert = tmp_path / "tls.crt"
    registry = CollectorRegistry()
    registry.register(CertificateExpiry(cert))
    assert _sample(registry) is None  # not there yet: no sample, the scrape still answers
    ca = make_ca()
    for days in (30, 365):  # issued, then rotated
        pem = make_serving_cert(ca, ["svc.ns.svc"], days=days).cert_pem
        cert.write_bytes(pem)
        assert _sample(registry) == not_after(pem).timestamp()
    cert.write_text("garbage")
    assert _sample(registry) is None


def test_registering_reads_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The webhook registers the gauge at start, in a registry that asks collectors for their
    # names (auto_describe, as webhook/server/metrics.py has it); the certificate (and
    # cryptography, to read it) waits for the first scrape.
    registry = CollectorRegistry(auto_describe=True)
    registry.register(CertificateExpiry(tmp_path / "missing.crt"))
    assert "unreadable" not in caplog.text
    assert _sample(registry) is None
    assert "unreadable" in caplog.text
