"""Cloud instance metadata, opt-in per provider: the node's switch groups as the cloud sees them.

One provider per agent (`--network-metadata azure|gcp|oci`), one request per `interval` at
most: the answer, good or bad, is kept until then, so dataset events that re-run discovery never
add requests. The endpoint is configurable (tests serve it on 127.0.0.1); the request bypasses any
HTTP proxy (metadata servers are link-local), reads at most `MAX_BODY` bytes and gives up after
`timeout` seconds. Unreachable, slow, malformed or absurd answers leave the position unknown,
with one log line per distinct reason.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.position.model import TierIds, Tiers

__all__ = ["MAX_BODY", "PROVIDERS", "MetadataError", "MetadataSource", "Provider"]

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024
_MAX_ID = 256  # a switch-group id longer than this is garbage, not an id to hash


class MetadataError(Exception):
    """The metadata answer could not be used (the message says why)."""


@dataclass(frozen=True, slots=True)
class Provider:
    name: str
    endpoint: str  # default; `--network-metadata-endpoint` replaces it
    headers: Mapping[str, str]
    parse: Callable[[bytes], TierIds]


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise MetadataError(f"not JSON ({e})") from None


def _id(value: Any, field: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise MetadataError(f"{field} is not a string: {type(value).__name__}")
    if len(value) > _MAX_ID or not value.isprintable():
        raise MetadataError(f"{field} is not a usable id ({len(value)} characters)")
    return value


def _parse_gcp(body: bytes) -> TierIds:
    """`instance/attributes/?recursive=true`: `physical_host_topology` (JSON: cluster, block,
    subblock, host), else the older `physical_host` (`/<block>/<subblock>/<host>`)."""
    attributes = _json(body)
    if not isinstance(attributes, dict):
        raise MetadataError("attributes are not a JSON object")
    topology = attributes.get("physical_host_topology")
    if topology is not None:
        if isinstance(topology, str):
            topology = _json(topology.encode())
        if not isinstance(topology, dict):
            raise MetadataError("physical_host_topology is not a JSON object")
        fields = {k.lower(): v for k, v in topology.items()}  # subblock or subBlock
        return (
            _id(fields.get("subblock"), "physical_host_topology.subblock"),
            _id(fields.get("block"), "physical_host_topology.block"),
            _id(fields.get("cluster"), "physical_host_topology.cluster"),
        )
    host = attributes.get("physical_host")
    if host is None:
        return (None, None, None)
    text = _id(host, "physical_host") or ""
    parts = [p for p in text.split("/") if p]
    if len(parts) != 3:
        raise MetadataError(f"physical_host is not /<block>/<subblock>/<host>: {text[:80]!r}")
    return (parts[1], parts[0], None)


def _parse_oci(body: bytes) -> TierIds:
    """`opc/v2/host/rdmaTopologyData`: local block, network block, HPC island."""
    data = _json(body)
    if not isinstance(data, dict):
        raise MetadataError("rdmaTopologyData is not a JSON object")
    return (
        _id(data.get("customerLocalBlock"), "customerLocalBlock"),
        _id(data.get("customerNetworkBlock"), "customerNetworkBlock"),
        _id(data.get("customerHPCIslandId"), "customerHPCIslandId"),
    )


def _parse_azure(body: bytes) -> TierIds:
    """IMDS `instance/compute`: `placementGroupId`, the scale set's placement group, which is
    the one grouping IMDS gives and the InfiniBand fabric's reach, so the outermost tier.
    Fault and update domains are indices within one set, not switch groups: not read."""
    compute = _json(body)
    if not isinstance(compute, dict):
        raise MetadataError("compute is not a JSON object")
    return (None, None, _id(compute.get("placementGroupId"), "placementGroupId"))


PROVIDERS: Mapping[str, Provider] = {
    "azure": Provider(
        "azure",
        "http://169.254.169.254/metadata/instance/compute?api-version=2021-02-01",
        {"Metadata": "true"},
        _parse_azure,
    ),
    "gcp": Provider(
        "gcp",
        "http://metadata.google.internal/computeMetadata/v1/instance/attributes/?recursive=true",
        {"Metadata-Flavor": "Google"},
        _parse_gcp,
    ),
    "oci": Provider(
        "oci",
        "http://169.254.169.254/opc/v2/host/rdmaTopologyData",
        {"Authorization": "Bearer Oracle"},
        _parse_oci,
    ),
}

# Metadata servers are link-local: never through the pod's HTTP(S)_PROXY.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _fetch(url: str, headers: Mapping[str, str], timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            body = b""
            while chunk := response.read(8192):
                body += chunk
                if len(body) > MAX_BODY:
                    raise MetadataError(f"answer longer than {MAX_BODY} bytes")
                if time.monotonic() > deadline:
                    raise MetadataError(f"answer slower than {timeout:g}s")
            return body
    except urllib.error.HTTPError as e:
        raise MetadataError(f"HTTP {e.code} from {url}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise MetadataError(f"cannot reach {url}: {reason}") from None


class MetadataSource:
    """Asks one provider at most once per `interval` seconds; `tiers()` never raises."""

    def __init__(
        self,
        provider: Provider,
        *,
        endpoint: str | None = None,
        timeout: float = 2.0,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.provider = provider
        self.endpoint = endpoint or provider.endpoint
        self.timeout = timeout
        self.interval = interval
        self.requests = 0  # sent so far (the figures count them)
        self._clock = clock
        self._asked_at: float | None = None
        self._answer: Tiers | None = None
        self._reported: set[str] = set()

    def tiers(self) -> Tiers | None:
        now = self._clock()
        if self._asked_at is not None and now - self._asked_at < self.interval:
            return self._answer
        self._asked_at = now
        self.requests += 1
        source = f"{self.provider.name} metadata"
        try:
            ids = self.provider.parse(_fetch(self.endpoint, self.provider.headers, self.timeout))
        except MetadataError as e:
            self._answer = None
            reason = str(e)
            if reason not in self._reported:  # once per distinct reason, not every resync
                self._reported.add(reason)
                log.warning("network position from %s unknown: %s", source, reason)
            return None
        self._answer = Tiers(source, ids)
        return self._answer
