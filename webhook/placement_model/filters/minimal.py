"""The smallest set of nodeSelectorTerms that matches exactly the nodes the given terms match.

What the engine writes goes into etcd with every pod, into every watch event and onto the
screen of whoever debugs the pod, so it is kept minimal (DESIGN "Webhook behaviour"):
- no term that no label set can satisfy (an empty integer band, an `In` set with nothing
  left, a key both required and forbidden), unless every term is such: then the terms stay
  as they are, so whoever reads the pod sees the contradiction (and a reinvocation reads
  back what it wrote);
- no expression implied by the others on its key in its term (a shape's `Exists` beside its
  own `Lt`, `Gt 127` beside `Gt 128`), and no duplicate;
- no term whose nodes another term matches too (terms are ORed);
- terms alike but for one expression on one key merged into one, where one expression says
  what either allows (`In` sets joined; `NotIn` less what an `In` allows; `Exists` or
  `DoesNotExist`: the key left out).

Equivalence is decided per key on a finite set of witness label values that meets every
region the key's expressions can tell apart (absent, each value named, each integer at and
around each bound, in canonical and non-canonical spelling, an unnamed word), each judged by
the one matcher (`selectors.requirement_matches`), so the rewrite cannot disagree with the
filter model. Cost: quadratic in the terms and expressions, and bounded: terms with more
than MAX_VALUES values on one key, or more than MAX_TERMS terms, are returned unchanged
(equivalent, only not minimal).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

from webhook.placement_model.filters.selectors import (
    Requirement,
    parse_int64,
    parse_requirement,
    requirement_matches,
)

__all__ = ["MAX_TERMS", "MAX_VALUES", "minimal_terms"]

MAX_TERMS = 64
MAX_VALUES = 256
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
Term = dict[str, Any]
_ABSENT = None  # a witness: the node lacks the label


def _parsed(term: Term) -> list[Requirement] | None:
    """The term's expressions, None when one is invalid or the term is beyond the bounds."""
    exprs = term.get("matchExpressions") or []
    if not isinstance(exprs, list):
        return None
    reqs = [parse_requirement(e) for e in exprs]
    if any(r.error is not None or len(r.values) > MAX_VALUES for r in reqs):
        return None
    return reqs


def _spellings(number: int, named: set[str]) -> Iterable[str]:
    """The number as ParseInt reads it: canonical, and one spelling no expression names
    (zero-padded, as a label value may be: `007`)."""
    yield str(number)
    sign = "-" if number < 0 else ""
    pad = "0"
    while f"{sign}{pad}{abs(number)}" in named:
        pad += "0"
    yield f"{sign}{pad}{abs(number)}"


@functools.lru_cache(maxsize=4096)
def _witnesses(reqs: tuple[Requirement, ...]) -> tuple[str | None, ...]:
    """Label values (None: absent) meeting every region these requirements distinguish."""
    named: set[str] = set()
    bounds: set[int] = set()
    for req in reqs:
        named.update(req.values)
        for value in req.values:
            number = parse_int64(value)
            if number is not None:
                bounds.add(number)
    points = {0}
    for b in bounds:
        points.update(p for p in (b - 1, b, b + 1) if _INT64_MIN <= p <= _INT64_MAX)
    word = "x"
    while word in named:
        word += "x"
    out: list[str | None] = [_ABSENT, word, *sorted(named)]
    for point in sorted(points):
        out.extend(s for s in _spellings(point, named) if s not in named)
    return tuple(out)


def _allows(reqs: Sequence[Requirement], value: str | None) -> bool:
    labels = {} if value is None else {reqs[0].key: value} if reqs else {}
    return all(requirement_matches(r, labels) for r in reqs)


def _implies(these: Sequence[Requirement], those: Sequence[Requirement]) -> bool:
    """Every value of one key that `these` allow, `those` allow too."""
    if not those:
        return True
    key = those[0].key
    return _key_implies(tuple(r for r in these if r.key == key), tuple(those))


@functools.lru_cache(maxsize=16384)
def _key_implies(these: tuple[Requirement, ...], those: tuple[Requirement, ...]) -> bool:
    # Cached: pods of one policy and size ask the same questions.
    witnesses = _witnesses((*these, *those))
    return all(_allows(those, w) for w in witnesses if _allows(these, w))


def _by_key(reqs: Sequence[Requirement]) -> dict[str, list[Requirement]]:
    out: dict[str, list[Requirement]] = {}
    for req in reqs:
        out.setdefault(req.key, []).append(req)
    return out


def _satisfiable(reqs: Sequence[Requirement]) -> bool:
    return all(_key_satisfiable(tuple(group)) for group in _by_key(reqs).values())


@functools.lru_cache(maxsize=4096)
def _key_satisfiable(group: tuple[Requirement, ...]) -> bool:
    return any(_allows(group, w) for w in _witnesses(group))


def _tight(raw: list[Any], reqs: list[Requirement]) -> tuple[list[Any], list[Requirement]]:
    """Without the expressions the rest of their key in the term implies (last first, so
    a duplicate's first spelling stays)."""
    keep = list(range(len(reqs)))
    for i in reversed(range(len(reqs))):
        rest = [reqs[j] for j in keep if j != i and reqs[j].key == reqs[i].key]
        if rest and _implies(rest, [reqs[i]]):
            keep.remove(i)
    return [raw[i] for i in keep], [reqs[i] for i in keep]


class _Term:
    __slots__ = ("fields", "raw", "reqs")

    def __init__(self, raw: Term, reqs: list[Requirement]) -> None:
        self.raw, self.reqs = raw, reqs
        self.fields = repr(raw.get("matchFields") or None)

    def within(self, other: _Term) -> bool:
        """Every node this term matches, `other` matches too."""
        if other.fields != "None" and other.fields != self.fields:
            return False
        mine = _by_key(self.reqs)
        return all(_implies(mine.get(k, []), group) for k, group in _by_key(other.reqs).items())


def _union(x: Requirement, y: Requirement) -> dict[str, Any] | bool | None:
    """One expression allowing what either allows; True when that is everything, None when
    no single expression says it."""
    ops = {x.operator, y.operator}
    if ops == {"Exists", "DoesNotExist"}:
        return True
    if ops == {"In"}:
        values = [*x.values, *(v for v in y.values if v not in x.values)]
        return {"key": x.key, "operator": "In", "values": values}
    if ops == {"In", "NotIn"}:
        out, into = (x, y) if x.operator == "NotIn" else (y, x)
        values = [v for v in out.values if v not in into.values]
    elif ops == {"NotIn"}:
        values = [v for v in x.values if v in y.values]
    else:
        return None
    return {"key": x.key, "operator": "NotIn", "values": values} if values else True


def _merged(a: _Term, b: _Term) -> _Term | None:
    """One term for two alike but for one expression on one key whose union one expression
    says (In ∪ In, NotIn ∪ In, …); None otherwise."""
    if a.fields != b.fields or len(a.reqs) != len(b.reqs):
        return None
    differ = [(i, j) for i, j in zip(a.reqs, b.reqs, strict=True) if i != j]
    if len(differ) != 1 or differ[0][0].key != differ[0][1].key:
        return None
    union = _union(*differ[0])
    at = a.reqs.index(differ[0][0])
    raw_exprs = list(a.raw["matchExpressions"])
    reqs = list(a.reqs)
    if union is True:  # the key no longer matters, so long as the term keeps something
        if len(reqs) == 1 and a.fields == "None":
            return None
        del raw_exprs[at], reqs[at]
    elif isinstance(union, dict) and len(union["values"]) <= MAX_VALUES:
        raw_exprs[at], reqs[at] = union, parse_requirement(union)
    else:
        return None
    return _Term({**a.raw, "matchExpressions": raw_exprs}, reqs)


def _drop_contained(terms: list[_Term]) -> list[_Term]:
    out: list[_Term] = []
    for i, term in enumerate(terms):
        # Kept unless a kept earlier term or any later term holds it (of two equal terms
        # the first stays).
        if any(term.within(o) for o in out) or any(
            term.within(o) and not o.within(term) for o in terms[i + 1 :]
        ):
            continue
        out.append(term)
    return out


def _merge_alike(terms: list[_Term]) -> tuple[list[_Term], bool]:
    for i, a in enumerate(terms):
        for j in range(i + 1, len(terms)):
            both = _merged(a, terms[j])
            if both is not None:
                return [*terms[:i], both, *terms[i + 1 : j], *terms[j + 1 :]], True
    return terms, False


def minimal_terms(terms: Sequence[Term]) -> list[Term]:
    """The smallest equivalent list of terms (see the module doc); the input is not changed,
    terms that need no change are returned as they are."""
    if len(terms) > MAX_TERMS:
        return list(terms)
    kept: list[_Term] = []
    for raw in terms:
        if not isinstance(raw, dict):
            return list(terms)
        reqs = _parsed(raw)
        if reqs is None:
            return list(terms)  # an invalid expression: the API server will say so
        if not reqs and not raw.get("matchFields"):
            continue  # an empty term matches nothing
        if not _satisfiable(reqs):
            continue
        exprs, reqs = _tight(list(raw.get("matchExpressions") or []), reqs)
        if len(exprs) != len(raw.get("matchExpressions") or []):
            raw = {**raw, "matchExpressions": exprs}
        kept.append(_Term(raw, reqs))
    if not kept:
        return list(terms)
    changed = True
    while changed:
        kept = _drop_contained(kept)
        kept, changed = _merge_alike(kept)
    return [t.raw for t in kept]
