"""A minimal syntax check for the CEL device selectors of DRA policies (`spec.dra.nic.selector`).

The API server compiles the expression when the reconciler creates the ResourceClaimTemplate,
but by then the policy is already serving: a typo should fail `validate` and the policy load
instead. A full CEL compiler is a heavy runtime dependency for one field, so this checks what
typos break: the tokens (strings terminated, no stray characters), balanced brackets, no
empty expression, no operator left dangling, and the API server's length limit. What passes
here can still fail type checking on the server; the reconciler logs that rejection.
tests/webhook/policy/test_cel.py cross-checks this against cel-python's full parser.
"""

from __future__ import annotations

import re

__all__ = ["CEL_MAX_LENGTH", "cel_syntax_problem"]

# resource.k8s.io/v1 CELSelectorExpressionMaxLength.
CEL_MAX_LENGTH = 10 * 1024

_STRING = (
    r"""[rR]?[bB]?[rR]?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|"""
    r"""'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")"""
)
_TOKEN = re.compile(
    rf"""(?P<space>\s+)
    |(?P<comment>//[^\n]*)
    |(?P<string>{_STRING})
    |(?P<number>0[xX][0-9a-fA-F]+[uU]?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[uU]?)
    |(?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<binary>&&|\|\||==|!=|<=|>=|[<>+*/%]|in\b)
    |(?P<minus>-)
    |(?P<bang>!)
    |(?P<dot>\.)
    |(?P<question>\?)
    |(?P<colon>:)
    |(?P<comma>,)
    |(?P<open>[(\[{{])
    |(?P<close>[)\]}}])""",
    re.VERBOSE | re.DOTALL,
)
_PAIRS = {")": "(", "]": "[", "}": "{"}
# Token kinds after which an operand ends (so a binary operator may follow).
_OPERAND_END = {"string", "number", "ident", "close"}


def cel_syntax_problem(expression: str) -> str | None:
    """None when `expression` looks like well-formed CEL, else what is wrong and where."""
    if not expression.strip():
        return "CEL expression must not be empty"
    if len(expression) > CEL_MAX_LENGTH:
        return f"CEL expression longer than {CEL_MAX_LENGTH} characters"
    stack: list[tuple[str, int]] = []
    previous = ""
    pos = 0
    while pos < len(expression):
        match = _TOKEN.match(expression, pos)
        if match is None:
            return f"unexpected character {expression[pos]!r} at column {pos + 1}"
        kind = match.lastgroup or ""
        text = match.group()
        if kind in ("space", "comment"):
            pos = match.end()
            continue
        if kind == "ident" and text == "in":
            kind = "binary"
        problem = _step(previous, kind, text, pos, stack)
        if problem:
            return problem
        previous = kind
        pos = match.end()
    if stack:
        bracket, at = stack[-1]
        return f"{bracket!r} at column {at + 1} is never closed"
    if previous not in _OPERAND_END:
        return "CEL expression ends with an operator"
    return None


def _step(
    previous: str, kind: str, text: str, pos: int, stack: list[tuple[str, int]]
) -> str | None:
    column = pos + 1
    if kind in ("binary", "question", "colon") and previous not in _OPERAND_END:
        return f"operator {text!r} at column {column} has no left operand"
    if kind in ("string", "number", "ident") and previous in _OPERAND_END:
        return f"{text!r} at column {column} follows an operand without an operator"
    if kind == "dot" and previous not in _OPERAND_END:
        return f"'.' at column {column} follows no operand"
    if kind == "comma" and (previous not in _OPERAND_END or not stack):
        return f"',' at column {column} outside brackets or after no operand"
    if kind == "open":
        stack.append((text, pos))
    elif kind == "close":
        if not stack or stack[-1][0] != _PAIRS[text]:
            return f"{text!r} at column {column} closes nothing that is open"
        stack.pop()
        # `f()`, `[]` and `{}` are fine; `(a +)` is not.
        if previous in ("binary", "minus", "bang", "dot", "question", "colon"):
            return f"{text!r} at column {column} follows an operator"
    return None
