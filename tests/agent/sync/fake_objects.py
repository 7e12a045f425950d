"""Kubernetes object plumbing for the fake API server: `Status` answers, RFC 7386 merge
patch, strategic merge for Node metadata maps, and the label validation kube-apiserver does."""

from __future__ import annotations

import copy
from typing import Any

from aiohttp import web

from common.k8s_names import label_key_problem, label_value_problem

__all__ = ["REASONS", "invalid_metadata", "merge", "status", "strategic"]


def status(code: int, reason: str, message: str, **details: Any) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return web.json_response(body, status=code)


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


def strategic(target: Any, patch: Any) -> Any:
    """Strategic merge for Node metadata/labels/annotations: maps merge, null deletes.

    (List merge keys do not matter for the fields the agent touches; `$patch` directives
    are rejected rather than guessed.)
    """
    if isinstance(patch, dict) and any(k.startswith("$") for k in patch):
        raise ValueError("strategic-merge directives are not supported by this fake")
    return merge(target, patch)


def invalid_metadata(node: dict[str, Any]) -> str | None:
    md = node.get("metadata")
    if not isinstance(md, dict):
        return "metadata must be an object"
    for section, check_values in (("labels", True), ("annotations", False)):
        entries = md.get(section) or {}
        if not isinstance(entries, dict):
            return f"metadata.{section} must be a map"
        for key, value in entries.items():
            problem = label_key_problem(key)
            if problem is None and not isinstance(value, str):
                problem = f"value of {key!r} must be a string"
            if problem is None and check_values:
                problem = label_value_problem(value)
            if problem:
                return f"metadata.{section}: Invalid value: {problem}"
    return None


REASONS = {
    409: "Conflict",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
