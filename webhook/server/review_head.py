"""The parts of an AdmissionReview read without building the whole pod (msgspec).

The pods of one Job reach the webhook as copies, and the answer cache (answer_cache.py)
finds a copy's answer from the request's fields, the pod's metadata and the bytes of its
spec. Decoding only those into typed structs skips the rest of the body in C; the body is
parsed whole (review.py) only when the engine has to compute an answer.

The types check what review.py checks of a Pod CREATE (metadata, labels and annotations
of strings, containers and initContainers lists of objects), and accept a subset of what
it accepts. Anything else (a wrong type, a missing field, a body that is not JSON or not
UTF-8) is `None` here, and review.py's full reading then names the problem, so every
error message still comes from one place.
"""

from __future__ import annotations

from typing import Final

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

__all__ = ["Meta", "PodHead", "Request", "read_head"]

_NULL: Final = Raw(b"null")
_ERRORS: Final = (msgspec.DecodeError, msgspec.ValidationError)


class Kind(Struct):
    group: str | None = None
    version: str | None = None
    kind: str | None = None


class Meta(Struct, rename={"generate_name": "generateName"}):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | UnsetType | None = UNSET  # missing and null differ


class _Object(Struct, rename={"api_version": "apiVersion"}):
    kind: str = "Pod"
    api_version: str = "v1"
    metadata: Meta | None = None
    spec: Raw = _NULL  # its bytes as sent: the answer cache's key


class Request(Struct, rename={"dry_run": "dryRun"}):
    uid: str
    operation: str
    kind: Kind
    namespace: str | None = None
    name: str | None = None
    object: _Object | None = None
    dry_run: bool | None = None


class _Review(Struct, rename={"api_version": "apiVersion"}):
    api_version: str
    kind: str
    request: Request


class _Any(Struct):
    """A JSON object, its members skipped."""


class _SpecShape(Struct, rename={"init_containers": "initContainers"}):
    containers: list[_Any]
    init_containers: list[_Any] | None = None
    hostname: str | None = None


class PodHead(Struct, frozen=True):
    """A Pod CREATE's metadata, and its spec's text without `hostname` (None: not cut out)."""

    meta: Meta
    spec: bytes | None


_review = msgspec.json.Decoder(_Review)
_spec = msgspec.json.Decoder(_SpecShape)


def read_head(body: bytes) -> tuple[Request, PodHead | None] | None:
    """The request of an AdmissionReview v1 body, and the pod's head for a v1 Pod CREATE;
    None: let the full reading look at it."""
    try:
        if not body.isascii():  # msgspec skips over members without checking their UTF-8
            body.decode()
        review = _review.decode(body)
    except (UnicodeDecodeError, *_ERRORS):
        return None
    if review.kind != "AdmissionReview" or review.api_version != "admission.k8s.io/v1":
        return None
    request = review.request
    gvk = request.kind
    if (request.operation, gvk.group or "", gvk.version or "", gvk.kind) != (
        "CREATE",
        "",
        "v1",
        "Pod",
    ):
        return request, None
    obj = request.object
    if obj is None or obj.kind != "Pod" or obj.api_version != "v1":
        return None
    spec = bytes(obj.spec)
    try:
        shape = _spec.decode(spec)
    except _ERRORS:
        return None
    return request, PodHead(obj.metadata or Meta(), _without_hostname(spec, shape.hostname))


def _without_hostname(spec: bytes, hostname: str | None) -> bytes | None:
    """The spec's text with its `hostname` member cut out (the Job controller sets one per
    pod and nothing reads it); None when that member is not found exactly once as written."""
    if hostname is None:
        return spec
    value = msgspec.json.encode(hostname)
    if spec.count(b'"hostname"') == 1:
        for member in (b'"hostname":' + value, b'"hostname": ' + value):
            if member in spec:
                return spec.replace(member, b"")
    return None
