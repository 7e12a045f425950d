"""Reading a failed Kubernetes API call: how long the server asked us to wait, and one line
that says what went wrong (the server's own message, not its headers)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any

__all__ = ["describe", "retry_after"]


def retry_after(headers: Mapping[str, str] | Any | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), None without one."""
    value = headers.get("Retry-After") if headers is not None and hasattr(headers, "get") else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def describe(exc: BaseException) -> str:
    """`HTTP 403 Forbidden: pods is forbidden: …` for an API answer, the error otherwise."""
    status = getattr(exc, "status", None)
    if not isinstance(status, int):
        return f"{type(exc).__name__}: {exc}"
    head = f"HTTP {status} {getattr(exc, 'reason', '') or ''}".strip()
    try:
        message = json.loads(getattr(exc, "body", None) or "{}").get("message")
    except (TypeError, ValueError, AttributeError):
        message = None
    return f"{head}: {message}" if message else head
