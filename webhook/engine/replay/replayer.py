"""The engine with replays: a pod of a form seen before gets that form's recorded answer.

`Replayer` is called as `recipe.mutate` is. It keeps, per policy set and settings (a reload
or another `stamp()` starts afresh), one recording per pod form (form.py): the patch, the
warnings and the verdict the engine gave a pod of that form. A later pod of the form gets
them as they are, and its mutated pod is its own with the patch applied (only the objects on
the patch's paths copied, patch_steps.py). Its cost no longer follows the steps: the form's
key, a lookup, the patch applied. The engine still answers a form's first two pods (the
recording is made from the second: pods alike to no other pay nothing for it), a pod with no
form, and any answer `reusable` turns down; an exception in it (a malformed pod) is never
kept.

Bounded: at most MAX_FORMS recordings and MAX_FORMS forms seen once, each dropped all at once
when full (many forms: start over, as the answer cache does); a recording is its key (at most
MAX_FORM_BYTES: a larger pod is never recorded) and its answer.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import Any, Final

from webhook.engine.outcome import EngineSettings, Mutation
from webhook.engine.patch import JsonPatch, encoded_patch
from webhook.engine.recipe import mutate
from webhook.engine.replay.form import form_key, reusable
from webhook.engine.replay.patch_steps import PatchSteps
from webhook.policy.loader import PolicySet
from webhook.policy.model import PlacementPolicy

__all__ = ["MAX_FORMS", "MAX_FORM_BYTES", "Engine", "Replayer"]

MAX_FORMS: Final = 256
# A form's key is the pod as the engine reads it: pods past this size (a usual pod's form is
# 2-10 KiB; the API server takes bodies up to 4 MiB) always go to the engine, so the
# recordings hold at most 2 x MAX_FORMS x MAX_FORM_BYTES of keys (32 MiB).
MAX_FORM_BYTES: Final = 64 * 1024
Engine = Callable[[dict[str, Any], str, PolicySet, EngineSettings], Mutation]


@dataclass(frozen=True, slots=True)
class _Recording:
    """One form's answer; shared by every pod of the form, so never edited."""

    patch: JsonPatch
    steps: PatchSteps
    warnings: tuple[str, ...]
    allowed: bool
    denial: str | None
    policy: str | None
    applied: PlacementPolicy | None
    written: str | None

    def answer(self, pod: dict[str, Any]) -> Mutation:
        return Mutation(
            pod=self.steps.apply(pod) if self.patch else pod,
            patch=self.patch,
            warnings=list(self.warnings),
            allowed=self.allowed,
            denial=self.denial,
            policy=self.policy,
            applied=self.applied,
            written=self.written,
        )


class Replayer:
    """`engine`'s answers, each form's computed once while the policy set, the settings and
    `stamp()` (what else the engine reads: the claim-template cache) stay the same."""

    def __init__(
        self,
        engine: Engine = mutate,
        *,
        stamp: Callable[[], Hashable] | None = None,
        max_forms: int = MAX_FORMS,
    ) -> None:
        self._engine = engine
        self._stamp = stamp
        self._max = max_forms
        self._recorded: dict[bytes, _Recording] = {}
        self._seen: set[bytes] = set()  # forms answered once, not recorded yet
        self._made_for: tuple[PolicySet | None, EngineSettings | None, Hashable] = (
            None,
            None,
            None,
        )
        self.replayed = 0  # tests and benchmarks read these
        self.computed = 0

    def __call__(
        self, pod: dict[str, Any], namespace: str, policies: PolicySet, settings: EngineSettings
    ) -> Mutation:
        key = form_key(pod, namespace)
        if key is None or len(key) > MAX_FORM_BYTES:
            return self._engine(pod, namespace, policies, settings)
        self._start_over_unless(policies, settings)
        recording = self._recorded.get(key)
        if recording is not None:
            try:
                answer = recording.answer(pod)
            except (ValueError, LookupError, TypeError, AttributeError):
                del self._recorded[key]  # not of the form after all: the engine says
            else:
                self.replayed += 1
                return answer
        self.computed += 1
        mutation = self._engine(pod, namespace, policies, settings)
        if key not in self._seen:
            # A form seen twice is recorded: a pod alike to none pays nothing more.
            if len(self._seen) >= self._max:
                self._seen.clear()
            self._seen.add(key)
            return mutation
        recording = _recording_of(pod, mutation)
        if recording is None:
            return mutation
        if len(self._recorded) >= self._max:
            self._recorded.clear()
        self._recorded[key] = recording
        return replace(mutation, written=recording.written)

    def _start_over_unless(self, policies: PolicySet, settings: EngineSettings) -> None:
        """Recordings hold for one policy set and settings (compared by identity: a reload makes a
        new set) and one stamp."""
        stamp = self._stamp() if self._stamp is not None else None
        was_policies, was_settings, was_stamp = self._made_for
        if policies is not was_policies or settings is not was_settings or stamp != was_stamp:
            self._recorded.clear()
            self._seen.clear()
            self._made_for = (policies, settings, stamp)


def _recording_of(pod: dict[str, Any], mutation: Mutation) -> _Recording | None:
    """The recording of `pod`'s form, from the engine's answer; None where it holds for this pod
    alone."""
    if not reusable(pod, mutation.patch):
        return None
    try:
        steps = PatchSteps(mutation.patch, pod)
        # Its own pod first: a recording that does not give the engine's result is never kept.
        if mutation.patch and steps.apply(pod) != mutation.pod:
            return None
    except (ValueError, LookupError, TypeError, AttributeError):
        return None
    return _Recording(
        mutation.patch,
        steps,
        tuple(mutation.warnings),
        mutation.allowed,
        mutation.denial,
        mutation.policy,
        mutation.applied,
        encoded_patch(mutation.patch) if mutation.patch else None,
    )
