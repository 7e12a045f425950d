"""The AdmissionReview answer: patch, warnings and denial, built without I/O."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from typing import Any, Final

from webhook import jsonio
from webhook.server.review import API_VERSION, KIND, AdmissionResponse, AdmissionReviewOut

__all__ = ["MAX_WARNING_CHARS", "WARNING_PREFIX", "build_response", "format_warning"]

# kube-apiserver may truncate a warning past 256 characters: cut ours there, at a word, so
# nothing it would have kept is lost (the no-fit warning names its misses and `explain` at
# the end). The engine keeps most warnings near Kubernetes' suggested 120.
MAX_WARNING_CHARS: Final = 256
WARNING_PREFIX: Final = "topoplace: "


def format_warning(text: str) -> str:
    """`topoplace: ` + text on one line, at most MAX_WARNING_CHARS (cut at a word, then `…`).

    kube-apiserver and kubectl handle short warnings best; the full text of every warning
    is what `topoplace-webhook mutate` prints offline.
    """
    line = WARNING_PREFIX + " ".join(text.split())
    if len(line) <= MAX_WARNING_CHARS:
        return line
    cut = line[: MAX_WARNING_CHARS - 1]
    # End on a word boundary unless that would throw away much of the message.
    space = cut.rfind(" ")
    if space >= MAX_WARNING_CHARS * 3 // 4:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def build_response(
    uid: str,
    *,
    allowed: bool = True,
    patch: Sequence[dict[str, Any]] = (),
    warnings: Iterable[str] = (),
    status_message: str | None = None,
    status_code: int = 403,
) -> AdmissionReviewOut:
    """The AdmissionReview to send back. Pure: no I/O, no clock, no globals.

    `patchType` appears only with a non-empty patch; a denial (`allowed=False`) carries
    `status.code`/`status.message` so `kubectl` shows the reason.
    """
    response: AdmissionResponse = {"uid": uid, "allowed": allowed}
    if patch and allowed:
        raw = jsonio.dumps(patch if isinstance(patch, list) else list(patch))
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(raw).decode("ascii")
    formatted = [format_warning(w) for w in warnings]
    if formatted:
        response["warnings"] = formatted
    if not allowed:
        message = status_message or "denied by topoplace"
        response["status"] = {"code": status_code, "message": message}
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}
