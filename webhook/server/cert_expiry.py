"""`topoplace_webhook_tls_certificate_expiry_timestamp_seconds`: the notAfter of the serving
certificate on disk, read at each scrape (the file the TLS reloader serves from, so a rotation
shows at the next scrape). An unreadable file yields no sample, logged once per reason: the
alert on it then says "absent", never a wrong date.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["CertificateExpiry"]

log = logging.getLogger(__name__)


class CertificateExpiry(Collector):
    def __init__(self, cert_path: Path) -> None:
        self._path = cert_path
        self._reported: str | None = None

    def describe(self) -> Iterator[Metric]:
        # Registering asks for the names: answered without reading the certificate, so
        # registration at start does not run collect() (and its import) early.
        yield _family()

    def collect(self) -> Iterator[Metric]:
        family = _family()
        # Imported at the first scrape, not at start: cryptography is about 8 MB of the
        # webhook's resident memory, and nothing else on the serving path needs it.
        from webhook.certs.keys import not_after

        try:
            expires = not_after(self._path.read_bytes())
        except (OSError, ValueError) as exc:
            if str(exc) != self._reported:
                log.warning("serving certificate %s unreadable for metrics: %s", self._path, exc)
                self._reported = str(exc)
        else:
            self._reported = None
            family.add_metric([], expires.timestamp())
        yield family


def _family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "topoplace_webhook_tls_certificate_expiry_timestamp_seconds",
        "Unix time the serving certificate expires (its notAfter)",
    )
