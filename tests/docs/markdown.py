"""Read fenced code blocks out of the reference pages and run their command lines.

Conventions the pages follow (so the tests can keep them honest):
- a ```sh block holds command lines; one starting with `topoplace-webhook validate|mutate|schema`
  or `topoplace-agent discover` is run from the repository root and must exit 0;
- a ```text block right after a ```sh block with one such command is that command's output:
  every line must appear, in order, in the real output; a line `…` stands for lines left out,
  `<hash>` for a 12-digit hex hash; a block without `…` must be the whole output;
- an HTML comment on the line before a fence (`<!-- key: value -->`) tags the block; several
  such lines in a row give it several tags (shell_blocks.py reads `docs-test`, `exit`, `file`).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Block",
    "Command",
    "Run",
    "commands",
    "fenced_blocks",
    "missing_lines",
    "run_cli",
]

REPO = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^( {0,3})```(\S*)\s*$")  # indented: inside a list item
_MARKER = re.compile(r"^<!--\s*([\w-]+):\s*(.*?)\s*-->$")
_TESTED = re.compile(r"^(topoplace-webhook (validate|mutate|schema)|topoplace-agent discover)\b")
_CLI_MODULE = {"topoplace-webhook": "webhook", "topoplace-agent": "agent"}
_SHELL_STOP = re.compile(r"^(\||&&|;|[0-9]?>>?.*)$")
_SKIP = "…"


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced code block: its language, text, first line number and tag (if any)."""

    lang: str
    text: str
    line: int
    tag: tuple[str, str] | None = None  # the nearest one
    tags: tuple[tuple[str, str], ...] = ()

    def tagged(self, key: str) -> str | None:
        return next((value for k, value in self.tags if k == key), None)


@dataclass(frozen=True, slots=True)
class Command:
    """A tested command line from a ```sh block, and the output block shown after it."""

    argv: tuple[str, ...]
    line: int
    shown: Block | None


@dataclass(frozen=True, slots=True)
class Run:
    returncode: int
    stdout: str
    stderr: str


def fenced_blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent = len(opening.group(1))
        end = index + 1
        while end < len(lines) and lines[end] != " " * indent + "```":
            end += 1
        tags: list[tuple[str, str]] = []
        above = index - 1
        while above >= 0 and (marker := _MARKER.match(lines[above].strip())):
            tags.insert(0, (marker.group(1), marker.group(2)))
            above -= 1
        blocks.append(
            Block(
                lang=opening.group(2),
                text="\n".join(ln[indent:] for ln in lines[index + 1 : end]) + "\n",
                line=index + 1,
                tag=tags[-1] if tags else None,
                tags=tuple(tags),
            )
        )
        index = end + 1
    return blocks


def commands(page: Path) -> list[Command]:
    """The tested command lines of a page (shell redirections and pipes cut off)."""
    blocks = fenced_blocks(page)
    found: list[Command] = []
    for position, block in enumerate(blocks):
        if block.lang != "sh":
            continue
        lines = [ln for ln in block.text.replace("\\\n", " ").splitlines() if _TESTED.match(ln)]
        following = blocks[position + 1] if position + 1 < len(blocks) else None
        shown = following if following and following.lang == "text" and len(lines) == 1 else None
        for text in lines:
            argv: list[str] = []
            for token in shlex.split(text):
                if _SHELL_STOP.match(token):
                    break
                argv.append(token)
            found.append(Command(tuple(argv), block.line, shown))
    return found


def run_cli(argv: tuple[str, ...] | list[str], *, cwd: Path = REPO, timeout: float = 30) -> Run:
    """Run `topoplace-webhook …`/`topoplace-agent …` as `python -m webhook|agent …`."""
    module = _CLI_MODULE[argv[0]]
    done = subprocess.run(
        [sys.executable, "-m", module, *argv[1:]],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def _pattern(line: str) -> re.Pattern[str]:
    return re.compile(re.escape(line.rstrip()).replace(re.escape("<hash>"), "[0-9a-f]{12}"))


def missing_lines(shown: str, actual: str) -> list[str]:
    """Lines of `shown` not found, in order, in `actual` (empty list: the excerpt is true)."""
    wanted = shown.splitlines()
    real = [ln.rstrip() for ln in actual.splitlines()]
    excerpt = any(ln.strip() == _SKIP for ln in wanted)
    wanted = [ln for ln in wanted if ln.strip() != _SKIP]
    if not excerpt:
        if len(wanted) != len(real):
            return [f"<whole output expected: {len(wanted)} lines shown, {len(real)} real>"]
        return [w for w, r in zip(wanted, real, strict=True) if not _pattern(w).fullmatch(r)]
    position = 0
    for number, line in enumerate(wanted):
        pattern = _pattern(line)
        while position < len(real) and not pattern.fullmatch(real[position]):
            position += 1
        if position == len(real):
            return wanted[number:]
        position += 1
    return []
