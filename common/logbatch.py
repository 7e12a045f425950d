"""A stream handler that writes the lines of one event-loop turn together.

The webhook logs one access line per admission, thousands a second; a write system call
for each was a visible share of a request's cost. Lines logged from the loop's thread are
kept until the end of the current turn (`call_soon`), then written at once; a WARNING or
worse, a line from any other thread, or one logged with no loop running is written at
once, with everything before it. `logging.shutdown` (at exit) flushes what is left.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TextIO

__all__ = ["BatchingStreamHandler"]


class BatchingStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._pending: list[str] = []
        self._scheduled = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self._pending.append(line)
        if record.levelno >= logging.WARNING or not self._flush_later():
            self.flush()

    def write_line(self, line: str) -> None:
        """An INFO line formatted elsewhere (common.logsetup.log_fields), kept as emit would."""
        self.acquire()
        try:
            self._pending.append(line)
            if not self._flush_later():
                self.flush()
        finally:
            self.release()

    def _flush_later(self) -> bool:
        if self._scheduled:
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        loop.call_soon(self.flush)
        self._scheduled = True
        return True

    def flush(self) -> None:
        self.acquire()
        try:
            self._scheduled = False
            if self._pending:
                text = "\n".join(self._pending) + self.terminator
                self._pending.clear()
                self.stream.write(text)
                if hasattr(self.stream, "flush"):
                    self.stream.flush()
        except Exception:
            self._pending.clear()
        finally:
            self.release()
