"""One log setup for both commands: human text by default, one JSON object per line on request.

Fields passed with `extra={...}` are kept: in JSON they become keys, in text `key=value` pairs,
so a decision log line ("gpu-nic-pairs 8 → 7", uid, latency) stays greppable either way.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Literal

__all__ = ["LogFormat", "add_logging_arguments", "configure_logging"]

LogFormat = Literal["text", "json"]

# Attributes every LogRecord has; anything else on a record came from `extra`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def _extras(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update(_extras(record))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


class _TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = _extras(record)
        if extras:
            line += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        return line


def configure_logging(level: str = "info", fmt: LogFormat = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def add_logging_arguments(parser: argparse.ArgumentParser, *, with_defaults: bool = True) -> None:
    """Add --log-level/--log-format; subcommand parsers pass with_defaults=False so a value
    given before the subcommand is not overwritten by the subparser's default."""
    level_default = "info" if with_defaults else argparse.SUPPRESS
    fmt_default = "text" if with_defaults else argparse.SUPPRESS
    parser.add_argument(
        "--log-level", default=level_default, choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument(
        "--log-format",
        default=fmt_default,
        choices=["text", "json"],
        help="text (default) or json: one object per line",
    )
