"""A tiny subcommand runner shared by both entry points.

Each subcommand lives in its own module exposing `add_arguments(parser)` and `run(args) -> int`.
Only the chosen subcommand's module is imported, and those modules keep heavy imports
(kubernetes-asyncio, fsspec, aiohttp) inside `run`, so `--help` and the prefetch init
container start fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping, Sequence
from typing import Protocol

from common.logsetup import configure_logging

__all__ = ["Command", "Main", "add_logging_arguments", "make_main"]

# subcommand name -> (module path, one-line help)
Command = tuple[str, str]

_OPTIONS_WITH_VALUE = {"--log-level", "--log-format"}


def _chosen(argv: Sequence[str], commands: Mapping[str, Command]) -> str | None:
    """The subcommand named on the command line, found without importing any module."""
    skip_next = False
    for token in argv:
        if skip_next:
            skip_next = False
        elif token in _OPTIONS_WITH_VALUE:
            skip_next = True
        elif not token.startswith("-"):
            return token if token in commands else None
    return None


def _build_parser(
    prog: str, doc: str, commands: Mapping[str, Command], chosen: str | None
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=doc)
    add_logging_arguments(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in commands.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        add_logging_arguments(cmd, with_defaults=False)  # accepted after it too
        if name == chosen:
            importlib.import_module(module).add_arguments(cmd)
    return parser


class Main(Protocol):
    """A command's entry point; no argv: sys.argv's."""

    def __call__(self, argv: Sequence[str] | None = None) -> int: ...


def make_main(prog: str, doc: str, commands: Mapping[str, Command]) -> Main:
    def main(argv: Sequence[str] | None = None) -> int:
        argv = list(sys.argv[1:] if argv is None else argv)
        chosen = _chosen(argv, commands)
        args = _build_parser(prog, doc, commands, chosen).parse_args(argv)
        configure_logging(args.log_level, args.log_format)
        return int(importlib.import_module(commands[args.command][0]).run(args))

    return main


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
