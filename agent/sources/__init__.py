"""Discovery sources: each reads one kind of raw fact under a root path and derives nothing.

Every source exposes `discover(root, ...) -> frozen dataclass`; `podresources` (the kubelet's
gRPC API, stubs generated into `podresources_pb`) exposes `list_pod_resources(socket)`;
`numa_stat`, `cgroups` and `procs` read the kernel's NUMA memory counters, pods' cgroups and
processes for the measured locality (agent.audit.measure).
The helpers here are the one place attribute files are read and cleaned, so a missing, empty
or garbled file produces the same `SysfsError` everywhere and the caller decides whether to
skip the device.

Imports: `common` only (the cache layout, for the dataset markers).
"""

from __future__ import annotations

import os

__all__ = ["SysfsError", "read_bounded", "read_int", "read_link_name", "read_text"]

# sysfs attributes are small; reading a bounded amount keeps a bogus huge file harmless.
_MAX_ATTR = 4096


class SysfsError(Exception):
    """An attribute file or link that is missing, empty or not in the expected format."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing  # absent rather than broken: often normal (optional attribute)


def read_text(path: str, *, allow_empty: bool = False) -> str:
    """The stripped text of an attribute file; SysfsError when missing, unreadable or empty."""
    try:
        # os.open/os.read rather than open(): no buffered file object for a 10-byte read,
        # a third of the cost over the ~1000 attributes of a large machine.
        fd = os.open(path, os.O_RDONLY)
        try:
            data = os.read(fd, _MAX_ATTR)
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise SysfsError(f"{path}: missing", missing=True) from None
    except OSError as e:
        raise SysfsError(f"{path}: unreadable ({e.strerror})") from None
    text = data.decode("utf-8", "replace").strip()
    if not text and not allow_empty:
        raise SysfsError(f"{path}: empty")
    return text


def read_int(path: str, *, base: int = 10) -> int:
    """An integer attribute (`0x10de` is read with base=16); SysfsError when not a number."""
    text = read_text(path)
    try:
        return int(text, base)
    except ValueError:
        raise SysfsError(f"{path}: not a number: {text[:40]!r}") from None


def read_link_name(path: str) -> str:
    """The last component of a symlink's target (`device -> ../../../0000:18:00.0`)."""
    try:
        target = os.readlink(path)
    except FileNotFoundError:
        raise SysfsError(f"{path}: missing", missing=True) from None
    except OSError as e:
        raise SysfsError(f"{path}: not a readable link ({e.strerror})") from None
    name = os.path.basename(os.path.normpath(target))
    if not name or name in (".", ".."):
        raise SysfsError(f"{path}: link target {target!r} names nothing")
    return name


def read_bounded(path: str, limit: int) -> str:
    """A whole file up to `limit` bytes; SysfsError when missing, unreadable or longer.

    ProcessLookupError (ESRCH, a process that exited between listing and reading) is a missing
    file too.
    """
    chunks: list[bytes] = []
    size = 0
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            while chunk := os.read(fd, 1 << 16):
                size += len(chunk)
                if size > limit:
                    raise SysfsError(f"{path}: longer than {limit} bytes")
                chunks.append(chunk)
        finally:
            os.close(fd)
    except (FileNotFoundError, ProcessLookupError):
        raise SysfsError(f"{path}: missing", missing=True) from None
    except OSError as e:
        raise SysfsError(f"{path}: unreadable ({e.strerror})") from None
    return b"".join(chunks).decode("ascii", "replace")
