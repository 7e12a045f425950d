"""A stream handler that writes the lines of one event-loop turn, or of a short interval,
together.

The webhook logs one access line per admission, thousands a second; a write system call
for each was a visible share of a request's cost. Lines logged from the loop's thread are
kept until the end of the current turn (`call_soon`), or for `interval` seconds (as klog
keeps its lines, for 5 s by default), then written at once; a WARNING or worse, a line
from any other thread, or one logged with no loop running is written at once, with
everything before it. `logging.shutdown` (at exit) flushes what is left.

A line may also be kept unrendered (`write_later`) and rendered at the end of the turn,
after the turn's responses have gone out: an access line's serialisation is then off the
request's path, and done for the turn's lines in one loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["BatchingStreamHandler"]

Render = Callable[[Any], str]


class BatchingStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """`interval` 0: a turn's lines are written at its end. Above 0: they are rendered at
    its end (a turn's few lines at a time: no pause while hundreds render at once) and
    written at most `interval` seconds later, or once `max_chars` are waiting."""

    def __init__(self, stream: TextIO, *, interval: float = 0.0, max_chars: int = 16384) -> None:
        super().__init__(stream)
        self._pending: list[str | tuple[Render, Any]] = []  # this turn's lines
        self._ready: list[str] = []  # rendered lines waiting for the write
        self._ready_chars = 0
        self._interval = interval
        self._max_chars = max_chars
        # The loops an end-of-turn or a timed write is scheduled on: a loop that ends first
        # (a test's) never runs it, and the next loop must schedule its own.
        self._turn_on: asyncio.AbstractEventLoop | None = None
        self._write_on: asyncio.AbstractEventLoop | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self._pending.append(line)
        if record.levelno >= logging.WARNING or not self._end_turn_later():
            self.flush()

    def write_later(self, render: Render, value: Any) -> None:
        """An INFO line, `render(value)`, rendered at the end of the turn (`value` must not
        change until then). A render that fails writes `repr(value)` instead."""
        self.acquire()
        try:
            self._pending.append((render, value))
            if not self._end_turn_later():
                self.flush()
        finally:
            self.release()

    def _end_turn_later(self) -> bool:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if self._turn_on is not loop:
            self._turn_on = loop
            loop.call_soon(self._end_turn, loop)
        return True

    def _end_turn(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._interval <= 0:
            self.flush()
            return
        self.acquire()
        try:
            self._turn_on = None
            self._render_pending()
            if self._ready_chars >= self._max_chars:
                self._write()
            elif self._ready and self._write_on is not loop:
                self._write_on = loop
                loop.call_later(self._interval, self.flush)
        finally:
            self.release()

    def _render_pending(self) -> None:
        lines = [_rendered(line) for line in self._pending]
        self._pending.clear()
        self._ready += lines
        self._ready_chars += sum(map(len, lines))

    def _write(self) -> None:
        self._write_on = None
        if not self._ready:
            return
        text = "\n".join(self._ready) + self.terminator
        self._ready.clear()
        self._ready_chars = 0
        self.stream.write(text)
        if hasattr(self.stream, "flush"):
            self.stream.flush()

    def flush(self) -> None:
        """Everything kept, rendered and written now (a warning, a timer, exit)."""
        self.acquire()
        try:
            self._turn_on = None
            self._render_pending()
            self._write()
        except Exception:
            self._pending.clear()
            self._ready.clear()
            self._ready_chars = 0
        finally:
            self.release()


def _rendered(line: str | tuple[Render, Any]) -> str:
    if isinstance(line, str):
        return line
    render, value = line
    try:
        return render(value)
    except Exception:  # never lose the line, nor the ones around it
        return repr(value)
