"""A stream handler that writes the lines of one event-loop turn, or of a short interval,
together.

The webhook logs one access line per admission, thousands a second; a write system call
for each was a visible share of a request's cost. Lines logged from the loop's thread are
kept until the end of the current turn (`call_soon`), or for `interval` seconds (as klog
keeps its lines, for 5 s by default), then written at once; a WARNING or worse, a line
from any other thread, or one logged with no loop running is written at once, with
everything before it. `logging.shutdown` (at exit) flushes what is left.

A line may also be kept unrendered (`write_later`) and rendered at the flush, after the
turn's responses have gone out: an access line's serialisation is then off the request's
path, and done for the turn's lines in one loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["BatchingStreamHandler"]

Render = Callable[[Any], str]


class BatchingStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """`interval` 0: a turn's lines are written at its end; above 0: at most that many
    seconds after the first of them, with those of every turn in between."""

    def __init__(self, stream: TextIO, *, interval: float = 0.0) -> None:
        super().__init__(stream)
        self._pending: list[str | tuple[Render, Any]] = []
        self._interval = interval
        # The loop a flush is scheduled on: a loop that ends first (a test's) never runs it.
        self._scheduled_on: asyncio.AbstractEventLoop | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self._pending.append(line)
        if record.levelno >= logging.WARNING or not self._flush_later():
            self.flush()

    def write_later(self, render: Render, value: Any) -> None:
        """An INFO line, `render(value)`, rendered when it is written (`value` must not
        change until then). A render that fails writes `repr(value)` instead."""
        self.acquire()
        try:
            self._pending.append((render, value))
            if not self._flush_later():
                self.flush()
        finally:
            self.release()

    def _flush_later(self) -> bool:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if self._scheduled_on is not loop:
            self._scheduled_on = loop
            if self._interval > 0:
                loop.call_later(self._interval, self.flush)
            else:
                loop.call_soon(self.flush)
        return True

    def flush(self) -> None:
        self.acquire()
        try:
            self._scheduled_on = None
            if self._pending:
                text = "\n".join(map(_rendered, self._pending)) + self.terminator
                self._pending.clear()
                self.stream.write(text)
                if hasattr(self.stream, "flush"):
                    self.stream.flush()
        except Exception:
            self._pending.clear()
        finally:
            self.release()


def _rendered(line: str | tuple[Render, Any]) -> str:
    if type(line) is str:
        return line
    render, value = line  # type: ignore[misc]
    try:
        return render(value)  # type: ignore[no-any-return]
    except Exception:  # never lose the line, nor the ones around it
        return repr(value)
