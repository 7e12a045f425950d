"""The engine with plans: a pod of a form seen before gets that form's answer, written for it.

`PlannedEngine` is called as `recipe.mutate` is. It keeps, per policy set and settings (a
reload or another `stamp()` starts afresh), one plan per pod form (form.py): the patch, the
warnings and the verdict the engine gave the form's first pod. A later pod of the form gets
them as they are, and its mutated pod is its own with the patch applied (only the objects on
the patch's paths copied). Its cost no longer follows the steps: the form's key, a lookup,
the patch applied. The engine still answers a form's first two pods (the plan is made from
the second: pods alike to no other pay nothing for plans), a pod with no form, and any answer
`reusable` turns down; an exception in it (a malformed pod) is never kept.

Bounded: at most MAX_PLANS plans and MAX_PLANS forms seen once, each dropped all at once when
full (many forms: start over, as the answer cache does); a plan is its key (at most the pod's
size) and its answer.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import Any, Final

from webhook.engine.outcome import EngineSettings, Mutation
from webhook.engine.patch import JsonPatch, encoded_patch
from webhook.engine.plans.apply import PatchSteps
from webhook.engine.plans.form import form_key, reusable
from webhook.engine.recipe import mutate
from webhook.policy.loader import PolicySet
from webhook.policy.model import PlacementPolicy

__all__ = ["MAX_PLANS", "Engine", "PlannedEngine"]

MAX_PLANS: Final = 256
Engine = Callable[[dict[str, Any], str, PolicySet, EngineSettings], Mutation]


@dataclass(frozen=True, slots=True)
class _Plan:
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


class PlannedEngine:
    """`engine`'s answers, each form's computed once while the policy set, the settings and
    `stamp()` (what else the engine reads: the claim-template cache) stay the same."""

    def __init__(
        self,
        engine: Engine = mutate,
        *,
        stamp: Callable[[], Hashable] | None = None,
        max_plans: int = MAX_PLANS,
    ) -> None:
        self._engine = engine
        self._stamp = stamp
        self._max = max_plans
        self._plans: dict[bytes, _Plan] = {}
        self._seen: set[bytes] = set()  # forms answered once, with no plan yet
        self._made_for: tuple[PolicySet | None, EngineSettings | None, Hashable] = (
            None,
            None,
            None,
        )
        self.reused = 0  # tests and benchmarks read these
        self.computed = 0

    def __call__(
        self, pod: dict[str, Any], namespace: str, policies: PolicySet, settings: EngineSettings
    ) -> Mutation:
        key = form_key(pod, namespace)
        if key is None:
            return self._engine(pod, namespace, policies, settings)
        self._start_over_unless(policies, settings)
        plan = self._plans.get(key)
        if plan is not None:
            try:
                answer = plan.answer(pod)
            except (ValueError, LookupError, TypeError, AttributeError):
                del self._plans[key]  # not of the form after all: the engine says
            else:
                self.reused += 1
                return answer
        self.computed += 1
        mutation = self._engine(pod, namespace, policies, settings)
        if key not in self._seen:
            # A plan is made for a form seen twice: a pod alike to none pays nothing more.
            if len(self._seen) >= self._max:
                self._seen.clear()
            self._seen.add(key)
            return mutation
        plan = _plan_of(pod, mutation)
        if plan is None:
            return mutation
        if len(self._plans) >= self._max:
            self._plans.clear()
        self._plans[key] = plan
        return replace(mutation, written=plan.written)

    def _start_over_unless(self, policies: PolicySet, settings: EngineSettings) -> None:
        """Plans hold for one policy set and settings (compared by identity: a reload makes a
        new set) and one stamp."""
        stamp = self._stamp() if self._stamp is not None else None
        was_policies, was_settings, was_stamp = self._made_for
        if policies is not was_policies or settings is not was_settings or stamp != was_stamp:
            self._plans.clear()
            self._seen.clear()
            self._made_for = (policies, settings, stamp)


def _plan_of(pod: dict[str, Any], mutation: Mutation) -> _Plan | None:
    """The plan of `pod`'s form, from the engine's answer; None where it holds for this pod
    alone."""
    if not reusable(pod, mutation.patch):
        return None
    try:
        steps = PatchSteps(mutation.patch, pod)
        # Its own pod first: a plan that does not give the engine's result is never kept.
        if mutation.patch and steps.apply(pod) != mutation.pod:
            return None
    except (ValueError, LookupError, TypeError, AttributeError):
        return None
    return _Plan(
        mutation.patch,
        steps,
        tuple(mutation.warnings),
        mutation.allowed,
        mutation.denial,
        mutation.policy,
        mutation.applied,
        encoded_patch(mutation.patch) if mutation.patch else None,
    )
