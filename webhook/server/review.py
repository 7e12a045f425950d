"""AdmissionReview `admission.k8s.io/v1` on the wire: the types, and the request read from it.

Two error channels: a body that is not a usable AdmissionReview raises `MalformedReview`
(the server answers HTTP 400 with its message); a pod the policy rejects is a normal
response with `allowed: false` (built by `response.build_response`).

The wire types are logic-free TypedDicts with the camelCase names Kubernetes uses; the parsed
request is a frozen dataclass so the admission logic never touches raw JSON shapes it has not
been promised.
"""

from __future__ import annotations

from typing import Any, Final, Literal, NotRequired, TypedDict, cast

from webhook import jsonio
from webhook.server.review_head import PodHead, read_head

__all__ = [
    "API_VERSION",
    "KIND",
    "AdmissionRequest",
    "AdmissionResponse",
    "AdmissionReviewIn",
    "AdmissionReviewOut",
    "GroupVersionKind",
    "MalformedReview",
    "Operation",
    "ResponseStatus",
    "ReviewRequest",
    "parse_review",
]

API_VERSION: Final = "admission.k8s.io/v1"
KIND: Final = "AdmissionReview"

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
_OPERATIONS: Final[frozenset[str]] = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class AdmissionRequest(TypedDict):
    uid: str
    kind: GroupVersionKind
    operation: Operation
    namespace: NotRequired[str]
    name: NotRequired[str]
    object: NotRequired[dict[str, Any] | None]
    oldObject: NotRequired[dict[str, Any] | None]
    dryRun: NotRequired[bool]


class AdmissionReviewIn(TypedDict):
    apiVersion: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


class ResponseStatus(TypedDict):
    code: int
    message: str


class AdmissionResponse(TypedDict):
    uid: str
    allowed: bool
    patchType: NotRequired[Literal["JSONPatch"]]
    patch: NotRequired[str]
    warnings: NotRequired[list[str]]
    status: NotRequired[ResponseStatus]


class AdmissionReviewOut(TypedDict):
    apiVersion: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    response: AdmissionResponse


class MalformedReview(ValueError):
    """The body is not an AdmissionReview v1 this webhook can answer; `str(exc)` says why."""


class ReviewRequest:
    """The parts of a validated request that the admission logic reads.

    Read from its head (review_head.py), a request keeps the `body` it came in, and parses
    it for `object` the first time something reads that; the answer cache answers a copy
    of an earlier pod from `pod` (its metadata and spec bytes) without ever reading it.
    """

    __slots__ = (
        "_body",
        "_object",
        "dry_run",
        "kind",
        "name",
        "namespace",
        "operation",
        "pod",
        "uid",
    )

    def __init__(
        self,
        uid: str,
        operation: Operation,
        kind: GroupVersionKind,
        namespace: str,
        name: str,
        object: dict[str, Any] | None = None,
        dry_run: bool = False,
        *,
        body: bytes | None = None,
        pod: PodHead | None = None,
    ) -> None:
        self.uid = uid
        self.operation = operation
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.dry_run = dry_run
        self.pod = pod
        self._object = object
        self._body = body

    @property
    def object(self) -> dict[str, Any] | None:
        body = self._body
        if body is not None:
            self._body = None
            self._object = _object_of(body, pod_create=self.is_pod_create)
        return self._object

    def pod_name_and_namespace(self) -> tuple[str, str]:
        """The pod's name as the access log shows it (a controller's pod has only its
        generateName at admission) and its namespace: from the head where there is one,
        else from the parsed pod."""
        head = self.pod
        if head is not None:
            meta = head.meta
            name: object = meta.name or meta.generate_name or self.name
            namespace: object = self.namespace or meta.namespace or ""
        else:
            parsed = (self.object or {}).get("metadata") or {}
            name = parsed.get("name") or parsed.get("generateName") or self.name
            namespace = self.namespace or parsed.get("namespace") or ""
        return (name if isinstance(name, str) else "", namespace)  # type: ignore[return-value]

    @property
    def is_pod_create(self) -> bool:
        return (
            self.operation == "CREATE"
            and self.kind["kind"] == "Pod"
            and self.kind["group"] == ""
            and self.kind["version"] == "v1"
        )

    def __repr__(self) -> str:
        kind = "/".join(
            v for v in (self.kind["group"], self.kind["version"], self.kind["kind"]) if v
        )
        return (
            f"ReviewRequest(uid={self.uid!r}, {self.operation} {kind} {self.namespace}/{self.name})"
        )


def _show(value: object) -> str:
    """A value from the request for an error message, never longer than a line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _field(doc: dict[str, Any], key: str, kind: type, where: str, *, required: bool = True) -> Any:
    value = doc.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, kind):
        expected = {dict: "an object", str: "a string", list: "a list", bool: "a boolean"}[kind]
        got = "missing" if key not in doc else type(value).__name__
        raise MalformedReview(f"{where}{key} must be {expected} (got {got})")
    return value


def _check_pod(obj: dict[str, Any]) -> None:
    """Shape checks the mutation engine relies on; the API server validates the rest later."""
    kind = obj.get("kind", "Pod")
    api_version = obj.get("apiVersion", "v1")
    if kind != "Pod" or api_version != "v1":
        raise MalformedReview(
            f"request.object has apiVersion {_show(api_version)} and kind {_show(kind)}, "
            "but request.kind says v1 Pod"
        )
    metadata = _field(obj, "metadata", dict, "request.object.", required=False) or {}
    for key in ("labels", "annotations"):
        mapping = _field(metadata, key, dict, "request.object.metadata.", required=False)
        if mapping and not all(isinstance(v, str) for v in mapping.values()):
            raise MalformedReview(f"request.object.metadata.{key} values must all be strings")
    spec = _field(obj, "spec", dict, "request.object.")
    for key in ("containers", "initContainers"):
        containers = _field(spec, key, list, "request.object.spec.", required=key == "containers")
        if containers and not all(isinstance(c, dict) for c in containers):
            raise MalformedReview(f"request.object.spec.{key} must be a list of objects")


def _load(body: bytes | str) -> Any:
    try:
        return jsonio.loads(body)
    except (ValueError, RecursionError) as exc:  # orjson's JSONDecodeError is a ValueError
        raise MalformedReview(f"body is not JSON: {exc}") from None


def _object_of(body: bytes, *, pod_create: bool) -> dict[str, Any] | None:
    """request.object of a body review_head.py has read, checked as `parse_review` would."""
    doc = _load(body)
    obj = doc["request"].get("object")
    if obj is not None and type(obj) is not dict:
        raise MalformedReview(f"request.object must be an object (got {type(obj).__name__})")
    if pod_create:
        if obj is None:
            raise MalformedReview("request.object must hold the Pod for a Pod CREATE")
        _check_pod(obj)
    return obj


def _from_head(body: bytes | str) -> ReviewRequest | None:
    """The request read from its head (review_head.py); None: read it all."""
    raw = body.encode() if isinstance(body, str) else body
    head = read_head(raw)
    if head is None:
        return None
    request, pod = head
    if not request.uid or request.operation not in _OPERATIONS:
        return None
    gvk = request.kind
    kind: GroupVersionKind = {
        "group": gvk.group or "",
        "version": gvk.version or "",
        "kind": gvk.kind or "",
    }
    return ReviewRequest(
        request.uid,
        cast(Operation, request.operation),
        kind,
        request.namespace or "",
        request.name or "",
        None,
        request.dry_run or False,
        body=None if request.object is None else raw,
        pod=pod,
    )


def parse_review(body: bytes | str) -> ReviewRequest:
    """Validate one request body; raise `MalformedReview` naming the first problem.

    The usual request is read from its head, its object parsed later, when something reads
    it (a problem in the pod then raises from there); anything else is read whole here.
    """
    fast = _from_head(body)
    return fast if fast is not None else _read_whole(body)


def _read_whole(body: bytes | str) -> ReviewRequest:
    """`parse_review` with the body parsed whole, and checked field by field."""
    doc = _load(body)
    if not isinstance(doc, dict):
        raise MalformedReview("body must be a JSON object (an AdmissionReview)")
    if doc.get("kind") != KIND:
        raise MalformedReview(f"kind must be {KIND!r} (got {_show(doc.get('kind'))})")
    if doc.get("apiVersion") != API_VERSION:
        raise MalformedReview(
            f"apiVersion must be {API_VERSION!r} (got {_show(doc.get('apiVersion'))}); "
            "set admissionReviewVersions: [v1] in the MutatingWebhookConfiguration"
        )
    request = _field(doc, "request", dict, "")
    uid = _field(request, "uid", str, "request.")
    if not uid:
        raise MalformedReview("request.uid must not be empty")
    operation = _field(request, "operation", str, "request.")
    if operation not in _OPERATIONS:
        raise MalformedReview(
            f"request.operation must be one of {sorted(_OPERATIONS)} (got {_show(operation)})"
        )
    gvk = _field(request, "kind", dict, "request.")
    for key in ("group", "version", "kind"):
        _field(gvk, key, str, "request.kind.", required=False)
    kind = GroupVersionKind(
        group=gvk.get("group") or "", version=gvk.get("version") or "", kind=gvk.get("kind") or ""
    )
    namespace = _field(request, "namespace", str, "request.", required=False) or ""
    name = _field(request, "name", str, "request.", required=False) or ""
    dry_run = _field(request, "dryRun", bool, "request.", required=False) or False
    obj = _field(request, "object", dict, "request.", required=False)
    parsed = ReviewRequest(
        uid=uid,
        operation=cast(Operation, operation),
        kind=kind,
        namespace=namespace,
        name=name,
        object=obj,
        dry_run=dry_run,
    )
    if parsed.is_pod_create:
        if obj is None:
            raise MalformedReview("request.object must hold the Pod for a Pod CREATE")
        _check_pod(obj)
    return parsed
