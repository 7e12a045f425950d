"""Node selector requirements, terms and node affinity, matched as kube-scheduler matches them.

The semantics of k8s.io/component-helpers/scheduling/corev1/nodeaffinity and the labels
package: terms are ORed and an empty term matches nothing; within a term every expression
must match (matchExpressions on labels, matchFields on `metadata.name`); a term with an
invalid expression matches nothing. In needs the key with a listed value, NotIn matches an
absent key, Gt/Lt need the key with a base-10 int64 value, compared with the one integer given.

A matchExpressions entry is valid as labels.NewRequirement checks it: a qualified-name key,
and every value a valid label value, the Gt/Lt operand included (so `-1` and `+1` make the
term match nothing, while `0100` is 100). matchFields entries are not checked beyond that.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.k8s_names import label_key_problem, label_value_problem

__all__ = [
    "OPERATORS",
    "PreferredTerm",
    "Requirement",
    "Term",
    "first_failing",
    "node_selector",
    "parse_int64",
    "parse_preferred",
    "parse_required",
    "parse_requirement",
    "requirement_matches",
    "term_matches",
]

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_OPERATORS = ("In", "NotIn")
_INT64 = re.compile(r"[+-]?[0-9]+")
_INT64_MAX = 2**63 - 1


def parse_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64): None when it is not a base-10 int64."""
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if -_INT64_MAX - 1 <= value <= _INT64_MAX else None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One matchExpressions / matchFields entry; `error` says why it is invalid (or None)."""

    key: str
    operator: str
    values: tuple[str, ...]
    error: str | None = None
    field: bool = False  # a matchFields entry (on metadata.name)

    @property
    def number(self) -> int | None:
        """The Gt/Lt operand."""
        return parse_int64(self.values[0]) if self.values else None


def parse_requirement(raw: Any, *, field: bool = False) -> Requirement:
    if not isinstance(raw, dict):
        return Requirement("", "", (), "not an object", field)
    key = raw.get("key")
    operator = raw.get("operator")
    values = raw.get("values") or []
    if not isinstance(key, str) or not isinstance(values, list):
        return Requirement(str(key), str(operator), (), "key or values malformed", field)
    return _requirement(key, str(operator), tuple(str(v) for v in values), field)


@functools.lru_cache(maxsize=4096)
def _requirement(key: str, operator: str, vals: tuple[str, ...], field: bool) -> Requirement:
    # Cached: the admission check parses the same few expressions for every pod of a policy.
    allowed = FIELD_OPERATORS if field else OPERATORS
    if operator not in allowed:
        return Requirement(key, operator, vals, f"operator {operator!r} not supported", field)
    return Requirement(key, operator, vals, _problem(key, operator, vals, field), field)


def _problem(key: str, operator: str, values: tuple[str, ...], field: bool) -> str | None:
    if field:
        return None if len(values) == 1 else "matchFields need exactly one value"
    # labels.NewRequirement's checks. The API server refuses such values in new pods since
    # v1.33; pods stored before, and the templates explain reads, can still carry them.
    problem = label_key_problem(key) or next(filter(None, map(label_value_problem, values)), None)
    if problem is not None:
        return problem
    if operator in ("In", "NotIn") and not values:
        return f"{operator} needs values"
    if operator in ("Exists", "DoesNotExist") and values:
        return f"{operator} takes no values"
    if operator in ("Gt", "Lt") and (len(values) != 1 or parse_int64(values[0]) is None):
        return f"{operator} needs exactly one integer value"
    return None


def requirement_matches(req: Requirement, labels: Mapping[str, str], name: str = "") -> bool:
    """Whether one valid requirement holds for a node's labels (or name, for matchFields)."""
    if req.field:
        # fields.Set.Get: a field the node lacks reads as "" (only metadata.name exists).
        value = name if req.key == "metadata.name" else ""
        return (value == req.values[0]) == (req.operator == "In")
    op = req.operator
    if op == "In":
        return labels.get(req.key) in req.values
    if op == "NotIn":
        return labels.get(req.key) not in req.values
    if op == "Exists":
        return req.key in labels
    if op == "DoesNotExist":
        return req.key not in labels
    have = labels.get(req.key)
    number = parse_int64(have) if have is not None else None
    wanted = req.number
    if number is None or wanted is None:
        return False
    return number > wanted if op == "Gt" else number < wanted


@dataclass(frozen=True, slots=True)
class Term:
    """A nodeSelectorTerm: every expression must match."""

    expressions: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]

    @property
    def valid(self) -> bool:
        return all(r.error is None for r in (*self.expressions, *self.fields))

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        return (*self.expressions, *self.fields)


def _term(raw: Any) -> Term | None:
    """A term, or None for an empty (or non-object) term, which matches nothing."""
    if not isinstance(raw, dict):
        return None
    exprs = raw.get("matchExpressions") or []
    fields = raw.get("matchFields") or []
    if not isinstance(exprs, list) or not isinstance(fields, list) or not (exprs or fields):
        return None
    return Term(
        tuple(parse_requirement(e) for e in exprs),
        tuple(parse_requirement(f, field=True) for f in fields),
    )


def term_matches(term: Term, labels: Mapping[str, str], name: str) -> bool:
    if not term.valid:
        return False
    if not all(requirement_matches(r, labels) for r in term.expressions):
        return False
    # The scheduler skips matchFields for a node without a name; every real node has one.
    return not name or all(requirement_matches(r, labels, name) for r in term.fields)


def parse_required(spec: Mapping[str, Any]) -> tuple[Term, ...] | None:
    """The pod's required node affinity as non-empty terms; None when it sets none."""
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    if not isinstance(node_affinity, dict):
        return None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, dict):
        return None
    raw_terms = required.get("nodeSelectorTerms") or []
    terms = [_term(t) for t in raw_terms] if isinstance(raw_terms, list) else []
    return tuple(t for t in terms if t is not None)


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    term: Term


def parse_preferred(spec: Mapping[str, Any]) -> tuple[PreferredTerm, ...]:
    """Preferred terms that count: weight > 0, a non-empty, valid preference."""
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    if not isinstance(node_affinity, dict):
        return ()
    raw = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    found: list[PreferredTerm] = []
    for entry in raw if isinstance(raw, list) else []:
        if not isinstance(entry, dict):
            continue
        weight = entry.get("weight")
        term = _term(entry.get("preference"))
        if isinstance(weight, int) and weight != 0 and term is not None and term.valid:
            found.append(PreferredTerm(weight, term))
    return tuple(found)


def node_selector(spec: Mapping[str, Any]) -> dict[str, str]:
    raw = spec.get("nodeSelector")
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def first_failing(
    reqs: Sequence[Requirement], labels: Mapping[str, str], name: str
) -> Requirement | None:
    for req in reqs:
        if req.error is not None or not requirement_matches(req, labels, name):
            return req
    return None
