"""A pod's form: all the engine reads of it, so pods of one form get the same answer.

The engine reads the whole spec but `hostname` and the values in `env` (only variable names:
a policy never overrides a pod's own variable), and of the rest only the kind, the policy
label, whether there are owner references, the namespace and the annotations it writes or
reads (issue 47). Everything else (names, other labels and annotations, `env` values, what a
controller writes per replica) is left out of the form, and must then be left out of the
answer too: `reusable` checks that the patch never carries or edits any of it, so an answer
that would (none the engine gives today) is simply not reused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from webhook import jsonio
from webhook.engine.patch import JsonPatch, escape_token, tokens
from webhook.vocabulary import APPLIED_ANNOTATION, MIRROR_ANNOTATION, POLICY_LABEL

__all__ = ["form_key", "reusable"]

_APPLIED: Final = escape_token(APPLIED_ANNOTATION)
# The only patch paths into metadata: the applied annotation, the map holding it, or metadata
# itself when the pod had none.
_METADATA_PATHS: Final = frozenset(
    {"/metadata", "/metadata/annotations", f"/metadata/annotations/{_APPLIED}"}
)
_CONTAINER_LISTS: Final = ("containers", "initContainers")


def form_key(pod: dict[str, Any], namespace: str) -> bytes | None:
    """The pod's form as bytes; None for a pod whose metadata or spec is not an object (the
    engine answers it, or refuses it, itself)."""
    meta = pod.get("metadata")
    spec = pod.get("spec")
    if type(meta) is not dict or type(spec) is not dict:
        return None
    labels = meta.get("labels")
    if type(labels) is not dict:
        return None
    annotations = meta.get("annotations", ...)
    if annotations is ...:
        held: object = "missing"
    elif annotations is None or type(annotations) is not dict:
        held = repr(type(annotations))  # null, or a value the engine refuses
    else:
        held = [annotations.get(APPLIED_ANNOTATION), MIRROR_ANNOTATION in annotations]
    spec_form = _spec_form(spec)
    if spec_form is None:
        return None
    read = [
        namespace,
        pod.get("kind"),
        labels.get(POLICY_LABEL),
        bool(meta.get("ownerReferences")),
        held,
        spec_form,
    ]
    try:
        return jsonio.dumps(read)
    except TypeError:  # not JSON-shaped: leave it to the engine
        return None


def _spec_form(spec: dict[str, Any]) -> dict[str, Any] | None:
    form = {**spec}
    form.pop("hostname", None)
    for key in _CONTAINER_LISTS:
        containers = form.get(key)
        if type(containers) is list:
            forms = [_container_form(c) for c in containers]
            if None in forms:
                return None
            form[key] = forms
    return form


def _container_form(container: Any) -> Any:
    """The container as the engine reads it: each variable's name, not its value; None where a
    variable is no object (the engine refuses the pod)."""
    if type(container) is not dict:
        return container
    env = container.get("env")
    if type(env) is not list:
        return container
    try:
        names = [e.get("name") for e in env]
    except AttributeError:  # of JSON values, only objects have .get
        return None
    return {**container, "env": names}


def reusable(pod: dict[str, Any], patch: JsonPatch) -> bool:
    """Whether `patch`, the engine's for `pod`, is the patch of every pod of `pod`'s form:
    it edits nothing outside the form and carries no part of the pod left out of it."""
    for op in patch:
        path = op["path"]
        if path.startswith("/metadata") and path not in _METADATA_PATHS:
            return False
        if _in_env_item(path, op["op"]) or path.startswith("/spec/hostname"):
            return False
    left_out = {id(x) for x in _left_out(pod)}
    return left_out.isdisjoint(_object_ids([op["value"] for op in patch if "value" in op]))


def _left_out(pod: dict[str, Any]) -> Iterator[Any]:
    """The objects of `pod` its form leaves out: metadata's maps and lists, every `env` list
    and variable."""
    meta = pod.get("metadata")
    if isinstance(meta, dict):
        yield meta
        yield from (v for v in meta.values() if isinstance(v, dict | list))
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    for key in _CONTAINER_LISTS:
        for container in spec.get(key) or ():
            env = container.get("env") if isinstance(container, dict) else None
            if isinstance(env, list):
                yield env
                yield from env


def _in_env_item(path: str, op: str) -> bool:
    """An edit of a variable the pod has, or of its list other than an append."""
    parts = tokens(path)
    if "env" not in parts:
        return False
    after = parts[parts.index("env") + 1 :]
    if not after:
        return op != "add"  # adding the whole list where there was none is the policy's
    return len(after) > 1 or (after[0] != "-" and op != "add")


def _object_ids(values: list[Any]) -> set[int]:
    """The ids of every object and list in `values`, at any depth."""
    seen: set[int] = set()
    stack = list(values)
    while stack:
        value = stack.pop()
        if type(value) is dict:
            seen.add(id(value))
            stack.extend(value.values())
        elif type(value) is list:
            seen.add(id(value))
            stack.extend(value)
    return seen
