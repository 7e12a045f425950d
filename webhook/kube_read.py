"""Lists and watches as plain JSON, for the webhook's layers (kept where they import it from;
the code lives in common/kube/read.py, which the agent shares)."""

from __future__ import annotations

from common.kube.read import ApiError, list_all, read_json, watch_events

__all__ = ["ApiError", "list_all", "read_json", "watch_events"]
