"""A MutatingAdmissionPolicy and its binding that write a given JSON patch: the floor peer.

The patch is our engine's own for the bench pod (bench_e2e.py computes it), so both paths
write the same bytes. Each RFC 6902 operation becomes a CEL `JSONPatch{…}` with its value
as a CEL literal. What CEL cannot do here, it does not pretend to: the policy is that one
pod shape's answer, fixed when it is written. It does not read the pod's GPU count, its
containers or its command (so a second shape needs a second policy), it cannot warn (a
mutating policy has no warnings: no fit verdict from the node cache, no notes about what
was skipped), it does not follow policy edits (a ConfigMap change means writing it again),
and it does not know the DRA claim templates that exist.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["PEER_LABEL", "cel_literal", "map_objects"]

PEER_LABEL = "bench.topoplace.io/peer"


def cel_literal(value: Any) -> str:
    """A CEL expression for a JSON value (strings as JSON writes them: CEL reads those)."""
    if isinstance(value, dict):
        # CEL map literals are typed by their values: dyn() lets one map hold a string
        # beside a list (a matchExpression), as JSON does.
        items = ", ".join(f"{json.dumps(str(k))}: dyn({cel_literal(v)})" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, list):
        return "[" + ", ".join(cel_literal(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return json.dumps(value)
    raise TypeError(f"not a JSON value: {value!r}")


def _operation(op: dict[str, Any]) -> str:
    fields = [f"op: {json.dumps(op['op'])}", f"path: {json.dumps(op['path'])}"]
    if "value" in op:
        fields.append(f"value: {cel_literal(op['value'])}")
    return "JSONPatch{" + ", ".join(fields) + "}"


def map_objects(name: str, patch: list[dict[str, Any]], peer: str = "map") -> list[dict[str, Any]]:
    """The policy (pods on CREATE) and its binding (pods labelled `PEER_LABEL: peer`)."""
    expression = "[\n" + ",\n".join(_operation(op) for op in patch) + "\n]"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "matchResources": {"objectSelector": {"matchLabels": {PEER_LABEL: peer}}},
        },
    }
    return [policy, binding]
