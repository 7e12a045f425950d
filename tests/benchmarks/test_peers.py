"""The bench-e2e peers write our patch: the CEL of the MutatingAdmissionPolicy and Kyverno's
patchesJson6902 hold exactly the operations our engine produced for the bench pod."""

from __future__ import annotations

import json

import pytest

from benchmarks.e2e.bench_e2e import _bodies, _our_patch
from benchmarks.peers.kyverno import kyverno_policy
from benchmarks.peers.map_policy import PEER_LABEL, cel_literal, map_objects


def test_cel_literals_of_json_values() -> None:
    value = {"a/b": [1, 'x"y', True, None, {"n": 2.5}], "nvidia.com/gpu": 2}
    assert (
        cel_literal(value)
        == '{"a/b": dyn([1, "x\\"y", true, null, {"n": dyn(2.5)}]), "nvidia.com/gpu": dyn(2)}'
    )
    with pytest.raises(TypeError):
        cel_literal({1, 2})


def test_the_policy_writes_each_operation_of_our_patch_in_order() -> None:
    patch = _our_patch("ml-bench-test")
    policy, binding = map_objects("peer", patch)
    expression = policy["spec"]["mutations"][0]["jsonPatch"]["expression"]
    lines = [line.rstrip(",") for line in expression.splitlines()[1:-1]]
    assert len(lines) == len(patch)
    for line, op in zip(lines, patch, strict=True):
        assert line.startswith(f'JSONPatch{{op: "{op["op"]}", path: "{op["path"]}"')
        assert line.endswith(f"value: {cel_literal(op['value'])}}}")
    assert binding["spec"]["matchResources"]["objectSelector"]["matchLabels"] == {PEER_LABEL: "map"}


def test_kyverno_writes_the_same_operations_for_its_pods_only() -> None:
    patch = _our_patch("ml-bench-test")
    rule = kyverno_policy("peer", patch)["spec"]["rules"][0]
    assert json.loads(rule["mutate"]["patchesJson6902"]) == patch
    selector = rule["match"]["any"][0]["resources"]["selector"]
    assert selector == {"matchLabels": {PEER_LABEL: "kyverno"}}


def test_only_the_webhook_body_opts_in_and_each_peer_body_names_its_peer() -> None:
    bodies = {k: json.loads(v) for k, v in _bodies(["map", "kyverno"]).items()}
    for path, pod in bodies.items():
        labels = pod["metadata"]["labels"]
        assert ("topoplace.io/policy" in labels) == (path == "webhook")
        assert labels.get(PEER_LABEL) == (path if path in ("map", "kyverno") else None)
