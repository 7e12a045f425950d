"""One log setup for both commands: human text by default, one JSON object per line on request.

Fields passed with `extra={...}` are kept: in JSON they become keys, in text `key=value` pairs,
so a decision log line ("gpu-nic-pairs 8 → 7", uid, latency) stays greppable either way.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Literal

import orjson

from common.logbatch import BatchingStreamHandler

__all__ = ["LogFormat", "configure_logging", "log_fields"]

LogFormat = Literal["text", "json"]

# Attributes every LogRecord has; anything else on a record came from `extra`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
}


def _extras(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class _SecondClock:
    """`strftime(pattern)` of a record's second, formatted once per second.

    The webhook writes an access line per admission, thousands a second: strftime and the
    struct_time conversion were a visible share of each line's cost.
    """

    __slots__ = ("_convert", "_last", "_pattern")

    def __init__(self, pattern: str, convert: Callable[[float], time.struct_time]) -> None:
        self._pattern = pattern
        self._convert = convert
        self._last: tuple[int, str] = (-1, "")

    def __call__(self, created: float) -> str:
        second = int(created)
        last = self._last
        if last[0] == second:
            return last[1]
        text = time.strftime(self._pattern, self._convert(second))
        self._last = (second, text)  # one tuple store: safe if two threads race here
        return text


class _JsonFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self._clock = _SecondClock("%Y-%m-%dT%H:%M:%S", time.gmtime)

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "ts": self.timestamp(record.created, record.msecs),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_extras(record),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return self.dumps(doc)

    def render_fields(self, line: tuple[float, str, str, dict[str, object]]) -> str:
        """The INFO line `log_fields` keeps: (time, logger name, message, fields)."""
        created, name, msg, fields = line
        ts = self.timestamp(created, (created - int(created)) * 1000)
        return self.dumps({"ts": ts, "level": "info", "logger": name, "msg": msg, **fields})

    def timestamp(self, created: float, msecs: float) -> str:
        return f"{self._clock(created)}.{int(msecs):03d}Z"

    @staticmethod
    def dumps(doc: dict[str, object]) -> str:
        try:
            # orjson: the webhook writes one access line per admission, and the stdlib
            # encoder was most of that line's cost. Compact, UTF-8, as json.dumps would be
            # with separators=(",", ":"); str() of what JSON cannot hold.
            return orjson.dumps(doc, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        except TypeError:  # an int beyond 64 bits, a recursion: the stdlib writes those
            return json.dumps(doc, default=str, ensure_ascii=False)


class _TextFormatter(logging.Formatter):
    """`%(asctime)s %(levelname)-7s %(name)s: %(message)s`, then `key=value` extras.

    Written out rather than through Formatter's %-style template so the hot access-log path
    formats the date once per second; the output is the same as that template's.
    """

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
        self._clock = _SecondClock(self.default_time_format, self.converter)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        # logging.Formatter sets it to "%s,%03d"; typeshed allows None for subclasses.
        msec_format = self.default_msec_format or "%s,%03d"
        return msec_format % (self._clock(record.created), record.msecs)

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        record.asctime = self.formatTime(record)
        line = f"{record.asctime} {record.levelname:<7} {record.name}: {record.message}"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += ("" if line.endswith("\n") else "\n") + record.exc_text
        if record.stack_info:
            line += ("" if line.endswith("\n") else "\n") + self.formatStack(record.stack_info)
        extras = _extras(record)
        if extras:
            line += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        return line


def _direct_handler(
    logger: logging.Logger,
) -> tuple[BatchingStreamHandler, _JsonFormatter] | None:
    """The JSON handler configure_logging installed, when an INFO record of `logger` would
    reach it and nothing else: no handler or filter on the way, none beside it."""
    node: logging.Logger | None = logger
    root = logging.root
    while node is not None and node is not root:
        if node.handlers or node.filters or node.disabled or not node.propagate:
            return None
        node = node.parent
    if root.filters or len(root.handlers) != 1:
        return None
    handler = root.handlers[0]
    formatter = handler.formatter
    if (
        type(handler) is not BatchingStreamHandler
        or handler.filters
        or handler.level > logging.INFO
        or not isinstance(formatter, _JsonFormatter)
        or type(formatter) is not _JsonFormatter
    ):
        return None
    return handler, formatter


def log_fields(logger: logging.Logger, msg: str, fields: dict[str, object]) -> None:
    """`logger.info(msg, extra=fields)`, for a line written per request (the access log).

    Where that record would reach only configure_logging's JSON handler (the usual case in
    `serve`), the same line is written from `fields` directly: building, routing and
    formatting a LogRecord was most of a line's cost. Anywhere else (text format, another
    handler, a filter, pytest's capture) it is an ordinary record.
    """
    if not logger.isEnabledFor(logging.INFO):
        return
    direct = _direct_handler(logger)
    if direct is None:
        # No source path: such a line has no use for one, and splitting it costs.
        record = logger.makeRecord(logger.name, logging.INFO, "", 0, msg, (), None, extra=fields)
        logger.handle(record)
        return
    handler, formatter = direct
    handler.write_later(formatter.render_fields, (time.time(), logger.name, msg, fields))


# INFO lines wait at most this long (common.logbatch): under load one write carries the
# lines of many admissions; a WARNING or worse is written at once.
FLUSH_INTERVAL_S = 0.05


def configure_logging(level: str = "info", fmt: LogFormat = "text") -> None:
    # Neither format prints thread or process names: skip looking them up for each record.
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = BatchingStreamHandler(sys.stderr, interval=FLUSH_INTERVAL_S)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
