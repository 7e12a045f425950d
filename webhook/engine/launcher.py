"""Find torchrun in a container's command line and add `--numa-binding=MODE` right after it.

Recognised launchers: `torchrun`, any path ending in `/torchrun`, and
`python[3[.x]] [-opts] -m torch.distributed.run`, either as argv tokens or inside the script
of `sh|bash -c` (also `-xc`, `-ec`, …; the script may sit in `command` or `args`).
An existing `--numa-binding`/`--numa_binding` on that launcher is left alone, so running
twice never duplicates the flag. (torchrun ignores PET_NUMA_BINDING, so an env var won't do.)
"""

from __future__ import annotations

import functools
import re

from webhook.engine.pod_fields import Container

__all__ = ["bind_numa"]

_SHELLS = frozenset({"sh", "bash", "dash", "ash", "ksh", "zsh"})
# A short-option cluster containing `c` (bash -c, -xc, -ec, -lc, -euxc...).
_SHELL_C = re.compile(r"-[a-zA-Z]*c[a-zA-Z]*")
_SHELL_O = re.compile(r"[-+][a-zA-Z]*o")
_PYTHON = re.compile(r"python(?:[0-9]+(?:\.[0-9]+)*)?")
_MODULE = "torch.distributed.run"
_EXISTING = ("--numa-binding", "--numa_binding")

# Inside a shell script: a launcher starting a word (after whitespace, ; & | ( or the start),
# ending at a word boundary the shell sees.
_WORD_START = r"(?<![^\s;&|(`])"
_WORD_END = r"(?=$|[\s;&|)`])"
_SCRIPT_LAUNCHER = re.compile(
    _WORD_START
    + r"(?:(?:[^\s;&|()`'\"]*/)?torchrun"
    + r"|(?:[^\s;&|()`'\"]*/)?python[0-9.]*(?:[ \t]+-[A-Za-z]+)*"
    + r"[ \t]+-m[ \t]*torch\.distributed\.run)"
    + _WORD_END
)
# The rest of that shell command: up to an unescaped newline or an operator (; & |).
_SCRIPT_REST = re.compile(r"(?:\\\n|[^;&|\n])*")
# Every pod of a job carries the same script, so its edit is cached; the length bound keeps
# the cache at a few MB whatever the pods hold.
_CACHED_SCRIPT_CHARS = 8192
_SCRIPT_EXISTING = re.compile(r"(?<![\w-])--numa[-_]binding\b")


def bind_numa(container: Container, mode: str) -> bool:
    """Add the flag to the container's launcher; False when no launcher was recognised."""
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
    argv = command + args
    flag = f"--numa-binding={mode}"

    script_at = _shell_script_index(argv)
    if script_at is not None:
        new_script, found = _bind_script(argv[script_at], flag)
        if new_script != argv[script_at]:
            argv[script_at] = new_script
            _store(container, argv, len(command))
        if found:
            return True

    insert_at = _argv_insert_index(argv)
    if insert_at is None:
        return False
    if not any(token.startswith(_EXISTING) for token in argv[insert_at:]):
        # Inserting at the end of `command` keeps the flag right after the launcher token.
        argv.insert(insert_at, flag)
        _store(container, argv, len(command) + (1 if insert_at <= len(command) else 0))
    return True


def _store(container: Container, argv: list[str], command_len: int) -> None:
    if command_len:
        container["command"] = argv[:command_len]
    if len(argv) > command_len or "args" in container:
        container["args"] = argv[command_len:]


def _basename(token: str) -> str:
    return token.rsplit("/", 1)[-1]


def _shell_script_index(argv: list[str]) -> int | None:
    """Index of the script in `… sh [options] -c SCRIPT …`, or None."""
    for index, token in enumerate(argv):
        if not isinstance(token, str) or _basename(token) not in _SHELLS:
            continue
        offset = index + 1
        while offset < len(argv) - 1:
            option = argv[offset]
            if not isinstance(option, str) or not option.startswith(("-", "+")):
                return None
            if _SHELL_C.fullmatch(option):
                return offset + 1
            # `-o pipefail`, `-euo pipefail`, `+o posix`: the option name is the next word.
            offset += 2 if _SHELL_O.fullmatch(option) else 1
        return None
    return None


def _argv_insert_index(argv: list[str]) -> int | None:
    """Where the flag goes in argv form: right after torchrun or `-m torch.distributed.run`."""
    for index, token in enumerate(argv):
        if not isinstance(token, str):
            continue
        if token == "torchrun" or token.endswith("/torchrun"):
            return index + 1
        if _PYTHON.fullmatch(_basename(token)):
            for offset in range(index + 1, len(argv)):
                option = argv[offset]
                if option == "-m" and offset + 1 < len(argv) and argv[offset + 1] == _MODULE:
                    return offset + 2
                if option == "-m" + _MODULE:
                    return offset + 1
                if not option.startswith("-"):
                    break
    return None


def _bind_script(script: str, flag: str) -> tuple[str, bool]:
    """The script with the flag after each launcher lacking it, and whether any was found."""
    if len(script) <= _CACHED_SCRIPT_CHARS:
        return _bind_script_cached(script, flag)
    return _bind_script_uncached(script, flag)


@functools.lru_cache(maxsize=256)
def _bind_script_cached(script: str, flag: str) -> tuple[str, bool]:
    return _bind_script_uncached(script, flag)


def _bind_script_uncached(script: str, flag: str) -> tuple[str, bool]:
    pieces: list[str] = []
    last = 0
    found = False
    for match in _SCRIPT_LAUNCHER.finditer(script):
        found = True
        rest = _SCRIPT_REST.match(script, match.end())
        if rest is not None and _SCRIPT_EXISTING.search(rest.group()):
            continue
        pieces.append(script[last : match.end()])
        pieces.append(" " + flag)
        last = match.end()
    pieces.append(script[last:])
    return "".join(pieces), found
