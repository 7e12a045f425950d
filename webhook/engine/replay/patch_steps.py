"""A recorded patch, read once into steps, then applied to each pod of the form.

Read against the pod it was made for, each path becomes a list of keys already typed (a list
index a number) and each operation the one edit it makes (set a key, append, insert, remove).
Applying it to another pod of the form is then a walk and the edits: the objects on the paths
are copied once each, everything else stays shared with the pod, as the engine's own result
shares it. Only the operations json_diff writes (add, replace, remove) are taken. A pod not of
the same structure after all raises (LookupError, TypeError, AttributeError or ValueError), so
the caller lets the engine answer it instead.
"""

from __future__ import annotations

from typing import Any, Final

from webhook.engine.patch import JsonPatch, tokens

__all__ = ["PatchSteps"]

# The edits: set or replace a key (or a list item), append, insert at, remove.
_SET, _REPLACE, _APPEND, _INSERT, _REMOVE = range(5)
_OPS: Final = ("add", "replace", "remove")

_Key = str | int
# (the index in `made` of the object edited, the edit, its key, its value)
_Edit = tuple[int, int, _Key, Any]
_Copies = tuple[tuple[int, _Key], ...]
_Edits = tuple[_Edit, ...]


class PatchSteps:
    """`patch` (RFC 6902, as json_diff writes it for `doc`) ready to apply to documents that
    have `doc`'s structure along its paths."""

    __slots__ = ("_copies", "_edits", "_in_turn")

    def __init__(self, patch: JsonPatch, doc: dict[str, Any]) -> None:
        for op in patch:
            if op["op"] not in _OPS or not op["path"]:
                raise ValueError(f"{op['op']} of {op['path']!r}: not a step a replay takes")
        self._in_turn: tuple[tuple[list[str], str, str, Any], ...] | None = None
        try:
            self._copies, self._edits = _read_ahead(patch, doc)
        except _NotApart:
            # A step moves or makes what a later one walks: each walks in turn.
            self._copies, self._edits = (), ()
            self._in_turn = tuple(
                (parents, last, op["op"], op.get("value"))
                for op in patch
                for *parents, last in [tokens(op["path"])]
            )

    def apply(self, doc: dict[str, Any]) -> dict[str, Any]:
        """`doc` patched, `doc` left as it is."""
        if self._in_turn is not None:
            return _apply_in_turn(doc, self._in_turn)
        made: list[Any] = [dict(doc)]
        for parent, key in self._copies:
            node = made[parent]
            child = node[key] = node[key].copy()
            made.append(child)
        for at, edit, key, value in self._edits:
            _do(made[at], edit, key, value)
        root: dict[str, Any] = made[0]
        return root


class _NotApart(Exception):
    """The steps cannot be read ahead: one makes, replaces or moves what another walks."""


def _read_ahead(patch: JsonPatch, doc: dict[str, Any]) -> tuple[_Copies, _Edits]:
    """Every object on the patch's paths, each once, parents first; then each edit with the
    object it edits."""
    made: dict[tuple[_Key, ...], int] = {(): 0}
    nodes: list[Any] = [doc]
    copies: list[tuple[int, _Key]] = []
    edits: list[_Edit] = []
    for op in patch:
        *parents, last = tokens(op["path"])
        path: tuple[_Key, ...] = ()
        for token in parents:
            node = nodes[made[path]]
            key = _typed(node, token)
            below = (*path, key)
            if below not in made:
                if not _holds(node, key):
                    raise _NotApart(f"{op['path']!r}: the document has no {token!r} yet")
                made[below] = len(nodes)
                nodes.append(node[key])
                copies.append((made[path], key))
            path = below
        at = made[path]
        edits.append(_edit_of(at, nodes[at], op["op"], last, op.get("value")))
    _check_apart(made, edits)
    return tuple(copies), tuple(edits)


def _apply_in_turn(
    doc: dict[str, Any], steps: tuple[tuple[list[str], str, str, Any], ...]
) -> dict[str, Any]:
    """Each step walks its path as the steps before it left the document."""
    root = dict(doc)
    copied = {id(root)}  # made here, so safe to edit; each stays alive inside root
    for parents, last, op, value in steps:
        node: Any = root
        for token in parents:
            key = _typed(node, token)
            child = node[key]
            if id(child) not in copied:
                child = node[key] = child.copy()
                copied.add(id(child))
            node = child
        _at, edit, key, _value = _edit_of(0, node, op, last, value)
        _do(node, edit, key, value)
    return root


def _do(node: Any, edit: int, key: _Key, value: Any) -> None:
    if edit == _SET:
        node[key] = value
    elif edit == _APPEND:
        node.append(value)
    elif edit == _REPLACE:
        _ = node[key]  # raises where the document has nothing to replace
        node[key] = value
    elif edit == _INSERT:
        if not isinstance(key, int) or key > len(node):
            raise ValueError(f"list index {key} past the end")
        node.insert(key, value)
    else:
        del node[key]


def _holds(node: Any, key: _Key) -> bool:
    return key < len(node) if isinstance(key, int) else key in node


def _typed(node: Any, token: str) -> _Key:
    if type(node) is list:
        if not token.isdigit():
            raise ValueError(f"list index {token!r}")
        return int(token)
    if type(node) is not dict:
        raise ValueError(f"a path through a {type(node).__name__}")
    return token


def _edit_of(at: int, node: Any, op: str, token: str, value: Any) -> _Edit:
    """The edit operation `op` (add, replace, remove) makes at `token` of `node`."""
    if type(node) is list and op == "add":
        return (
            (at, _APPEND, 0, value) if token == "-" else (at, _INSERT, _typed(node, token), value)
        )
    key = _typed(node, token)
    if op == "remove":
        return (at, _REMOVE, key, None)
    return (at, _REPLACE if op == "replace" else _SET, key, value)


def _check_apart(made: dict[tuple[_Key, ...], int], edits: list[_Edit]) -> None:
    """The copies are made before the edits: no edit may make, replace or move an object a
    path goes through. The engine's patches never do (each op carries its whole value); one
    that did is refused here rather than applied wrong."""
    keys = {index: path for path, index in made.items()}
    for at, edit, key, _value in edits:
        path = (*keys[at], key)
        if path in made:
            raise _NotApart(f"an edit of {path!r}, which another path goes through")
        moves = edit in (_INSERT, _REMOVE) and type(key) is int  # the items after it
        if moves and any(p[: len(path) - 1] == path[:-1] and len(p) >= len(path) for p in made):
            raise _NotApart(f"an insertion or removal in {path[:-1]!r}, which a path walks")
