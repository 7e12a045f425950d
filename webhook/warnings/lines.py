"""One admission warning line within the API server's 256 characters, `topoplace: ` counted.

kube-apiserver may truncate a warning past 256 characters, so every warning the webhook sends
is shortened here, once. A placement warning is built as `Parts`: a head (what is wrong), items
(node names, failing checks) that go one by one from the end, text after them, and a tail
that is always kept whole (the pointer to `kubectl topoplace explain`). Shortening order:
items, then the text after them, then the head (say, a long policy name). Engine warnings
are plain text: `plain_line` cuts them at a word. `mutate` prints those in full offline, and
`explain` says in full what a placement warning sums up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from webhook.warnings.kinds import WarningKind, WarningLine

__all__ = ["EXPLAIN", "LIMIT", "MORE", "PREFIX", "Parts", "as_line", "plain_line", "shorten"]

LIMIT: Final = 256
PREFIX: Final = "topoplace: "
EXPLAIN: Final = "; run `kubectl topoplace explain`"
MORE: Final = "…"  # stands for items left out, and ends a cut text
_MIN_ITEM = 12  # a single item cut shorter than this says nothing; it goes instead
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Parts:
    """A warning before fitting. Rendered whole: `head + items + after + tail`, the items
    joined by `, `, in ` (…)` after the head when `bracketed` (and then left out entirely
    when none fits), else right after it (then `…` stands for them all)."""

    head: str
    items: tuple[str, ...] = ()
    more: bool = False  # there are more items than given: `…` follows them
    bracketed: bool = False
    after: str = ""
    tail: str = ""
    kind: WarningKind = field(kw_only=True)  # which check says it (kinds.py)

    def text(self) -> str:
        """The whole warning, not shortened, without the prefix."""
        body = _body(list(self.items), self.more, self.bracketed)
        return self.head + body + self.after + self.tail


def _body(items: list[str], more: bool, bracketed: bool) -> str:
    shown = [*items, MORE] if more else items
    if not shown:
        return ""
    return f" ({', '.join(shown)})" if bracketed else ", ".join(shown)


def _one_line(text: str) -> str:
    return _SPACE.sub(" ", text)


def _cut(text: str, room: int) -> str:
    """`text` in at most `room` characters: cut at a word unless that loses a quarter."""
    if len(text) <= room:
        return text
    if room <= len(MORE):
        return MORE[: max(room, 0)]
    cut = text[: room - len(MORE)]
    space = cut.rfind(" ")
    if space >= room * 3 // 4:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + MORE


def shorten(parts: Parts) -> str:
    """The warning line as sent: `topoplace: ` + the parts, at most LIMIT characters, the
    tail whole. Raises ValueError for a tail that leaves no room (a programming error)."""
    tail = _one_line(parts.tail)
    room = LIMIT - len(PREFIX) - len(tail)
    if room < 2 * len(MORE) + 1:
        raise ValueError(f"warning tail of {len(tail)} characters leaves no room: {tail!r}")
    head, after = _one_line(parts.head), _one_line(parts.after)
    items = [_one_line(item) for item in parts.items]
    more, bracketed = parts.more, parts.bracketed

    def length() -> int:
        return len(head) + len(_body(items, more, bracketed)) + len(after)

    while length() > room and len(items) > 1:
        items.pop()
        more = True
    if length() > room and items:
        left = room - len(head) - len(after) - len(_body([""], more, bracketed))
        if left >= _MIN_ITEM:  # (less than the item: it did not fit whole)
            items[0] = _cut(items[0], left)
        else:
            items, more = [], not bracketed
    body = _body(items, more, bracketed)
    if len(head) + len(body) > room:  # a long policy name: the text after it goes, then it
        return PREFIX + _cut(head + body, room) + tail
    return PREFIX + head + body + _cut(after, room - len(head) - len(body)) + tail


def as_line(parts: Parts) -> WarningLine:
    """`shorten(parts)` with the kind of warning it is."""
    return WarningLine(parts.kind, shorten(parts))


def plain_line(text: str) -> str:
    """An engine warning as sent: `topoplace: ` + text on one line, cut at a word."""
    return PREFIX + _cut(" ".join(text.split()), LIMIT - len(PREFIX))
