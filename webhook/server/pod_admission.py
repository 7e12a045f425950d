"""Admission logic without transport: a validated review in, an AdmissionReview response out.

The server depends only on the `Admitter` protocol; this module never imports aiohttp.
Scope: Pod CREATE with the policy label. Everything else (other operations, other kinds,
pods that did not opt in, mirror pods) is allowed unchanged. `dryRun` needs no special
handling because admitting has no side effects (`sideEffects: None`).

An unexpected engine exception fails open: logged with the request uid, answered
`allowed: true` with a warning, so a webhook bug never blocks pod creation cluster-wide.
With a fit check (webhook/warnings: the node cache, the scheduler's Lease), a mutated pod
gets the placement warnings, already shortened, after the engine's; the check never denies,
and a failure in it only loses those warnings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

from webhook.engine.outcome import EngineSettings, Mutation
from webhook.engine.patch import encoded_patch
from webhook.engine.pod_fields import InvalidPod
from webhook.engine.recipe import mutate as engine_mutate
from webhook.policy.loader import PolicySet
from webhook.policy.model import PlacementPolicy
from webhook.server.review import (
    API_VERSION,
    KIND,
    AdmissionResponse,
    AdmissionReviewOut,
    MalformedReview,
    ReviewRequest,
)
from webhook.vocabulary import MIRROR_ANNOTATION, POLICY_LABEL
from webhook.warnings.kinds import WarningKind, WarningLine
from webhook.warnings.lines import plain_line

__all__ = [
    "FAILED_OPEN_WARNED",
    "Admission",
    "Admitter",
    "FitCheck",
    "MutateFn",
    "Outcome",
    "PolicyAdmitter",
    "build_response",
    "engine_kinds",
]

logger = logging.getLogger(__name__)

Outcome = Literal["mutated", "unchanged", "passthrough", "denied", "failed_open"]
MutateFn = Callable[[dict[str, Any], str, PolicySet, EngineSettings], Mutation]
# (mutated pod, the policy applied or None) -> warning lines as sent, `topoplace: ` and all,
# with their kinds (webhook/warnings/placement.py): it fits no node, or not as asked
FitCheck = Callable[[dict[str, Any], PlacementPolicy | None], list[WarningLine]]
# The one warning of an answer that failed open (here, the workload admitter, the handler).
FAILED_OPEN_WARNED: Final = (WarningKind.INTERNAL_ERROR,)

_EMPTY = PolicySet()


@dataclass(frozen=True, slots=True)
class Admission:
    """The response plus what the access log and metrics need to know about it."""

    review: AdmissionReviewOut
    outcome: Outcome
    policy: str | None = None
    patch_ops: int = 0
    pod_name: str = ""
    namespace: str = ""
    payload: bytes | None = None  # `review` as JSON, where already written (a reused answer)
    warned: tuple[WarningKind, ...] = ()  # the kind of each warning in `review`, in order


class Admitter(Protocol):
    """The one call the transport makes.

    Raises only MalformedReview (the object is not shaped like a Pod: HTTP 400); any other
    problem is answered inside the returned Admission.
    """

    def admit(self, request: ReviewRequest) -> Admission: ...


def _passes(labels: object, annotations: object) -> bool:
    """A pod that did not opt in, or a mirror pod (the kubelet's static pods): not ours."""
    return (
        not isinstance(labels, dict)
        or POLICY_LABEL not in labels
        or (isinstance(annotations, dict) and MIRROR_ANNOTATION in annotations)
    )


class PolicyAdmitter:
    """Applies the serving policy set to opted-in pods.

    `policies` returns the serving set; it is read once per request, so one request always
    sees one whole set even while a reload swaps it.
    """

    def __init__(
        self,
        policies: Callable[[], PolicySet | None],
        settings: EngineSettings,
        *,
        mutate: MutateFn | None = None,
        fit_check: FitCheck | None = None,
    ) -> None:
        if mutate is None:
            mutate = engine_mutate
        self._policies = policies
        self._settings = settings
        self._mutate = mutate
        self._fit_check = fit_check

    def admit(self, request: ReviewRequest) -> Admission:
        uid = request.uid
        if not request.is_pod_create:  # its object is never read, nor parsed
            return Admission(build_response(uid), "passthrough", namespace=request.namespace)
        head = request.pod
        if head is not None and _passes(head.meta.labels, head.meta.annotations):
            # Decided from the head: the pod is not parsed (the head checked its shape).
            name, namespace = request.pod_name_and_namespace()
            policy = (head.meta.labels or {}).get(POLICY_LABEL)
            return Admission(build_response(uid), "passthrough", policy, 0, name, namespace)
        pod = request.object
        if pod is None:
            return Admission(build_response(uid), "passthrough", namespace=request.namespace)
        meta: dict[str, Any] = pod.get("metadata") or {}
        name, namespace = request.pod_name_and_namespace()
        policy = (meta.get("labels") or {}).get(POLICY_LABEL)
        if _passes(meta.get("labels"), meta.get("annotations")):
            return Admission(build_response(uid), "passthrough", policy, 0, name, namespace)
        policies = self._policies() or _EMPTY
        try:
            mutation = self._mutate(pod, namespace, policies, self._settings)
            placed = self._fit_warnings(mutation) if mutation.allowed else []
            return self._answer(uid, mutation, name, namespace, placed)
        except InvalidPod as exc:
            raise MalformedReview(f"request.object: {exc}") from None
        except Exception:
            # Fail open: a bug here must not block every opted-in pod in the cluster.
            logger.exception(
                "mutation engine failed; admitting the pod unchanged",
                extra={"uid": uid, "namespace": namespace, "pod": name, "policy": policy},
            )
            warning = f"internal error applying policy {policy!r}; pod admitted unchanged"
            review = build_response(uid, warnings=[warning])
            return Admission(
                review, "failed_open", policy, 0, name, namespace, warned=FAILED_OPEN_WARNED
            )

    def _fit_warnings(self, mutation: Mutation) -> list[WarningLine]:
        """The placement warnings; a failure here only loses them, never the pod."""
        if self._fit_check is None or mutation.applied is None:
            return []
        try:
            return self._fit_check(mutation.pod, mutation.applied)
        except Exception:
            logger.exception("node fit check failed; admitting without it")
            return []

    @staticmethod
    def _answer(
        uid: str, mutation: Mutation, name: str, namespace: str, placed: list[WarningLine]
    ) -> Admission:
        warned = engine_kinds(mutation.warnings)
        if not mutation.allowed:
            review = build_response(
                uid, allowed=False, warnings=mutation.warnings, status_message=mutation.denial
            )
            return Admission(review, "denied", mutation.policy, 0, name, namespace, warned=warned)
        review = build_response(
            uid,
            patch=mutation.patch,
            warnings=mutation.warnings,
            lines=[w.line for w in placed],
            written=mutation.written,
        )
        outcome: Outcome = "mutated" if mutation.patch else "unchanged"
        warned += tuple(w.kind for w in placed)
        ops = len(mutation.patch)
        return Admission(review, outcome, mutation.policy, ops, name, namespace, warned=warned)


def engine_kinds(warnings: Sequence[str]) -> tuple[WarningKind, ...]:
    """The kinds of the engine's plain-text warnings: all one kind (kinds.py)."""
    return (WarningKind.ENGINE,) * len(warnings)


def build_response(
    uid: str,
    *,
    allowed: bool = True,
    patch: Sequence[dict[str, Any]] = (),
    warnings: Iterable[str] = (),
    lines: Iterable[str] = (),
    status_message: str | None = None,
    status_code: int = 403,
    written: str | None = None,
) -> AdmissionReviewOut:
    """The AdmissionReview to send back. Pure: no I/O, no clock, no globals.

    `patchType` appears only with a non-empty patch; a denial (`allowed=False`) carries
    `status.code`/`status.message` so `kubectl` shows the reason. `warnings` are the engine's
    plain texts, given `topoplace: ` and cut here; `lines` are lines already made to send
    (webhook/warnings: the placement warnings), after them and left as they are. `written` is
    `patch` already encoded, where it was (a replayed one's, engine/replay).
    """
    response: AdmissionResponse = {"uid": uid, "allowed": allowed}
    if patch and allowed:
        response["patchType"] = "JSONPatch"
        response["patch"] = written or encoded_patch(patch)
    formatted = [*(plain_line(w) for w in warnings), *lines]
    if formatted:
        response["warnings"] = formatted
    if not allowed:
        message = status_message or "denied by topoplace"
        response["status"] = {"code": status_code, "message": message}
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}
