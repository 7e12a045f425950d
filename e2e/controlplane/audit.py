"""The e2e API server's audit log: the policy that writes it, and the one reader of it.

The policy logs, at Metadata level, only writes (create, update, patch, delete) to Nodes
(and their status) and NodeResourceTopologies, so a pod churn does not fill it. The log is
JSON lines of audit.k8s.io/v1 Event; `read_writes` turns its lines into records, pure, and
`count_writes` counts a user's writes in a time window. A line that is not such an event (a
line cut short by rotation or a crash, another format) is skipped and counted, never raised.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = [
    "AUDIT_BACKUPS",
    "AUDIT_MAX_MB",
    "AUDIT_POLICY",
    "WRITE_VERBS",
    "AuditWrite",
    "WriteCount",
    "audit_files",
    "count_writes",
    "lines_of",
    "read_writes",
]

WRITE_VERBS = ("create", "update", "patch", "delete")

AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Metadata",
            "verbs": list(WRITE_VERBS),
            "resources": [
                {"group": "", "resources": ["nodes", "nodes/status"]},
                {"group": "topology.node.k8s.io", "resources": ["noderesourcetopologies"]},
            ],
        },
        {"level": "None"},
    ],
}
# Rotation bounded: at most 1 + AUDIT_BACKUPS files of AUDIT_MAX_MB each.
AUDIT_MAX_MB = 64
AUDIT_BACKUPS = 2


@dataclass(frozen=True, slots=True)
class AuditWrite:
    """One completed write: `resource` is `nodes`, `nodes/status`, `noderesourcetopologies`…"""

    time: float  # requestReceivedTimestamp, Unix seconds
    user: str
    verb: str
    resource: str
    name: str
    code: int  # responseStatus.code; 0 when the event carries none

    @property
    def succeeded(self) -> bool:
        return 0 < self.code < 300


@dataclass(frozen=True, slots=True)
class WriteCount:
    """A user's successful writes in a window, by (verb, resource); `failed`: refused ones."""

    by_kind: Counter[tuple[str, str]] = field(default_factory=Counter)
    failed: int = 0
    malformed: int = 0  # lines skipped as not an audit event

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _write(event: Any) -> AuditWrite | None:
    """The event as a write record; None when it is another stage or not a write.
    Raises KeyError, TypeError or ValueError when it is not shaped as an audit Event."""
    if event["stage"] != "ResponseComplete" or event["verb"] not in WRITE_VERBS:
        return None
    ref = event["objectRef"]
    resource = ref["resource"]
    if ref.get("subresource"):
        resource = f"{resource}/{ref['subresource']}"
    code = (event.get("responseStatus") or {}).get("code", 0)
    return AuditWrite(
        time=_stamp(event["requestReceivedTimestamp"]),
        user=str(event["user"]["username"]),
        verb=str(event["verb"]),
        resource=str(resource),
        name=str(ref.get("name", "")),
        code=int(code),
    )


def read_writes(lines: Iterable[str]) -> tuple[list[AuditWrite], int]:
    """The completed writes the lines record, and how many lines were skipped as malformed."""
    writes: list[AuditWrite] = []
    malformed = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            write = _write(json.loads(line))
        except (ValueError, KeyError, TypeError):
            malformed += 1
            continue
        if write is not None:
            writes.append(write)
    return writes, malformed


def count_writes(
    lines: Iterable[str], *, user: str, start: float, end: float = float("inf")
) -> WriteCount:
    """`user`'s writes received in [start, end), by (verb, resource)."""
    writes, malformed = read_writes(lines)
    mine = [w for w in writes if w.user == user and start <= w.time < end]
    done = Counter((w.verb, w.resource) for w in mine if w.succeeded)
    return WriteCount(done, sum(not w.succeeded for w in mine), malformed)


def audit_files(log: Path) -> list[Path]:
    """The log and its rotated backups (`audit-<time>.log` beside it), oldest first."""
    backups = sorted(log.parent.glob(f"{log.stem}-*{log.suffix}"))
    return [*backups, log] if log.exists() else backups


def lines_of(log: Path) -> Iterable[str]:
    """Every line of the log and its backups; a backup removed meanwhile is passed over."""
    for path in audit_files(log):
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:
            continue
        yield from text.splitlines()
