"""The AdmissionReview answer: patch, warnings and denial, built without I/O."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from typing import Any

from webhook import jsonio
from webhook.server.review import API_VERSION, KIND, AdmissionResponse, AdmissionReviewOut
from webhook.warnings.fit import fit_text

__all__ = ["build_response"]


def build_response(
    uid: str,
    *,
    allowed: bool = True,
    patch: Sequence[dict[str, Any]] = (),
    warnings: Iterable[str] = (),
    fitted: Iterable[str] = (),
    status_message: str | None = None,
    status_code: int = 403,
) -> AdmissionReviewOut:
    """The AdmissionReview to send back. Pure: no I/O, no clock, no globals.

    `patchType` appears only with a non-empty patch; a denial (`allowed=False`) carries
    `status.code`/`status.message` so `kubectl` shows the reason. `warnings` are the engine's
    plain texts, given `topoplace: ` and cut here; `fitted` are lines already made to send
    (webhook/warnings: the placement warnings), after them and left as they are.
    """
    response: AdmissionResponse = {"uid": uid, "allowed": allowed}
    if patch and allowed:
        raw = jsonio.dumps(patch if isinstance(patch, list) else list(patch))
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(raw).decode("ascii")
    formatted = [*(fit_text(w) for w in warnings), *fitted]
    if formatted:
        response["warnings"] = formatted
    if not allowed:
        message = status_message or "denied by topoplace"
        response["status"] = {"code": status_code, "message": message}
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}
