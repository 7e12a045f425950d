"""The floor of an admission in Python: parse the AdmissionReview, write the response.

Any webhook pays this whatever its engine does: the body parsed with the JSON library the
server uses (webhook/jsonio.py: orjson), the request's uid read, and the response written
with the patch and warnings the engine gave (the operations as JSON, base64, the review).
`respond` is that floor for one body; the bare webhooks of bench_e2e.py answer with it
too, their patch fixed. Nothing here decides anything: the answer is given.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from typing import Any

from webhook import jsonio
from webhook.server.review import API_VERSION, KIND

__all__ = ["Given", "given_of", "load_average", "respond"]


@dataclass(frozen=True, slots=True)
class Given:
    """What the engine answered for one body: its patch operations and warnings."""

    ops: list[dict[str, Any]]
    warnings: list[str]


def given_of(answer: bytes) -> Given:
    """The patch and warnings of an answer our server wrote (to replay them at the floor)."""
    response = jsonio.loads(answer)["response"]
    ops = jsonio.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return Given(ops, list(response.get("warnings", [])))


def respond(body: bytes, given: Given) -> bytes:
    """Parse `body` whole, write the allow with `given`'s patch: the same bytes as
    webhook.server.pod_admission.build_response writes for that answer."""
    uid = jsonio.loads(body)["request"]["uid"]
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if given.ops:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(jsonio.dumps(given.ops)).decode("ascii")
    if given.warnings:
        response["warnings"] = given.warnings
    return jsonio.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def load_average() -> str:
    """The machine's 1-minute load, printed beside every figure taken on a shared machine."""
    return f"load {os.getloadavg()[0]:.1f}"
