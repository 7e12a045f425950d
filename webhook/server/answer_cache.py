"""Answers for alike pods, computed once: the pods of one Job reach the webhook as copies.

`CachedAdmitter` wraps the `PolicyAdmitter` (the `Admitter` protocol on both sides). For an
opted-in Pod CREATE it keys the request by everything the answer is made from — the
namespace, the policy label, the parts of the annotations the engine reads and the whole
spec but `hostname` (the Job controller sets it per pod; nothing reads it), for a spec of at
most MAX_KEY_BYTES — and keeps the
answer, minus the request's uid, with the *stamp* it was made under. The stamp is what else
the answer depends on: the serving policy set, the node cache's index and generation, the
claim-template cache's generation. An entry is used only while the stamp is the same, so a
policy reload, a node change or a template change makes the next admission compute afresh.

Only answers the engine made are kept (`mutated`, `unchanged`, `denied`): a fail-open answer
or a malformed pod always goes through the engine again.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Final

from msgspec import UNSET

from webhook import jsonio
from webhook.server.pod_admission import Admission, Admitter
from webhook.server.review import (
    API_VERSION,
    KIND,
    AdmissionResponse,
    AdmissionReviewOut,
    ReviewRequest,
)
from webhook.vocabulary import APPLIED_ANNOTATION, MIRROR_ANNOTATION, POLICY_LABEL
from webhook.warnings.kinds import WarningKind

__all__ = ["DEFAULT_MAX_ENTRIES", "MAX_KEY_BYTES", "CachedAdmitter", "Stamp", "request_key"]

DEFAULT_MAX_ENTRIES: Final = 512  # an entry is about the pod's size (key) plus its patch
# A larger spec is never kept (a usual pod's is 2-10 KiB; bodies may be 4 MiB): the keys held
# stay under DEFAULT_MAX_ENTRIES x MAX_KEY_BYTES (32 MiB).
MAX_KEY_BYTES: Final = 64 * 1024
_KEPT: Final = frozenset({"mutated", "unchanged", "denied"})
# annotations missing (UNSET), JSON null, or an object: the patch adds the map, replaces the null,
# or adds one key to the map (the other keys are the user's and never in the patch).
_MISSING, _NULL, _MAP = 0, 1, 2

Stamp = Callable[[], Hashable]
# A reused answer's JSON up to its uid: the review as response.build_response orders it.
_REVIEW_HEAD: Final = b'{"apiVersion":"%s","kind":"%s","response":{"uid":' % (
    API_VERSION.encode(),
    KIND.encode(),
)


def _shape(annotations: object) -> tuple[object, ...]:
    if annotations is UNSET:
        return (_MISSING,)
    if annotations is None:
        return (_NULL,)
    if not isinstance(annotations, dict):
        raise TypeError(f"metadata.annotations is a {type(annotations).__name__}, not a map")
    return (_MAP, annotations.get(APPLIED_ANNOTATION), MIRROR_ANNOTATION in annotations)


def request_key(request: ReviewRequest) -> Hashable | None:
    """The cache key of an opted-in Pod CREATE; None for anything the cache leaves alone.

    From the request's head where it has one (the spec's bytes as sent, never parsed);
    else from the parsed pod, the spec written out again.
    """
    if not request.is_pod_create:
        return None
    head = request.pod
    if head is not None and head.spec is not None:
        meta = head.meta
        policy = (meta.labels or {}).get(POLICY_LABEL)
        if policy is None:
            return None
        namespace = request.namespace or meta.namespace or ""
        if len(head.spec) > MAX_KEY_BYTES:
            return None
        return (namespace, policy, _shape(meta.annotations), head.spec)
    pod = request.object
    if pod is None:
        return None
    metadata = pod.get("metadata") or {}
    policy = (metadata.get("labels") or {}).get(POLICY_LABEL)
    if policy is None:
        return None
    namespace = request.namespace or metadata.get("namespace") or ""  # as PolicyAdmitter reads it
    spec = pod.get("spec")
    if type(spec) is dict and "hostname" in spec:
        spec = {k: v for k, v in spec.items() if k != "hostname"}
    try:
        text = jsonio.dumps(spec)
    except TypeError:  # not JSON-shaped: leave it to the engine
        return None
    if len(text) > MAX_KEY_BYTES:
        return None
    return (namespace, policy, _shape(metadata.get("annotations", UNSET)), text)


@dataclass(frozen=True, slots=True)
class _Entry:
    stamp: Hashable
    response: dict[str, Any]  # the AdmissionResponse without its uid; never mutated
    tail: bytes  # that response as JSON after the uid, and the review's close
    outcome: Any
    policy: str | None
    patch_ops: int
    warned: tuple[WarningKind, ...]


class CachedAdmitter:
    """`inner`'s answers, reused for requests with the same key while `stamp()` holds."""

    def __init__(
        self, inner: Admitter, stamp: Stamp, *, max_entries: int = DEFAULT_MAX_ENTRIES
    ) -> None:
        self._inner = inner
        self._stamp = stamp
        self._max = max_entries
        self._entries: dict[Hashable, _Entry] = {}
        self.hits = 0  # tests and benchmarks read these
        self.misses = 0

    def admit(self, request: ReviewRequest) -> Admission:
        key = request_key(request)
        if key is None:
            return self._inner.admit(request)
        stamp = self._stamp()
        entry = self._entries.get(key)
        if entry is not None and entry.stamp == stamp:
            self.hits += 1
            return self._reuse(entry, request)
        self.misses += 1
        admission = self._inner.admit(request)  # MalformedReview propagates: nothing kept
        if admission.outcome in _KEPT:
            if len(self._entries) >= self._max:
                self._entries.clear()  # many different pods, or many changes: start over
            response = {k: v for k, v in admission.review["response"].items() if k != "uid"}
            tail = b"," + jsonio.dumps(response)[1:] + b"}"
            self._entries[key] = _Entry(
                stamp,
                response,
                tail,
                admission.outcome,
                admission.policy,
                admission.patch_ops,
                admission.warned,
            )
            # The answer is written out once: the transport sends these bytes as they are.
            payload = _REVIEW_HEAD + jsonio.dumps(request.uid) + tail
            return Admission(  # dataclasses.replace costs as much as the rest of this miss
                admission.review,
                admission.outcome,
                admission.policy,
                admission.patch_ops,
                admission.pod_name,
                admission.namespace,
                payload,
                admission.warned,
            )
        return admission

    def clear(self) -> None:
        self._entries.clear()

    @staticmethod
    def _reuse(entry: _Entry, request: ReviewRequest) -> Admission:
        response: AdmissionResponse = {"uid": request.uid, **entry.response}  # type: ignore[typeddict-item]
        review: AdmissionReviewOut = {"apiVersion": API_VERSION, "kind": KIND, "response": response}
        name, namespace = request.pod_name_and_namespace()
        return Admission(
            review,
            entry.outcome,
            entry.policy,
            entry.patch_ops,
            name,
            namespace,
            _REVIEW_HEAD + jsonio.dumps(request.uid) + entry.tail,
            entry.warned,
        )
