"""The agent's ValidatingAdmissionPolicy, evaluated with a CEL runtime (cel-python) the way the
API server evaluates it: matchConditions first (all true → the policy applies), then the
variables in order, then every validation (any false or erroring → the request is denied,
failurePolicy Fail). Requests are node UPDATEs as the API server presents them: `object` is
the Node after the patch, `oldObject` before, `request.userInfo` the caller."""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any

import celpy
import pytest
from celpy import celtypes

from common.vocabulary import (
    DATASET_PREFIX,
    LABEL_PREFIX,
    TOPOLOGY_ANNOTATION,
    Label,
    dataset_label,
)
from tests.manifests.rendered import render

_ENV = celpy.Environment()
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def _policy() -> dict[str, Any]:
    return render().one("ValidatingAdmissionPolicy", "topoplace-agent-node-scope")


@functools.cache
def _program(expression: str) -> celpy.Runner:
    return _ENV.program(_ENV.compile(expression))


def _true(runner: celpy.Runner, activation: dict[str, Any]) -> bool:
    try:
        result = runner.evaluate(activation)
    except celpy.CELEvalError:
        return False  # failurePolicy Fail: an evaluation error denies
    return isinstance(result, celtypes.BoolType) and bool(result)


def agent_username() -> str:
    r = render()
    agent = r.one("DaemonSet", "topoplace-agent")
    sa = agent["spec"]["template"]["spec"]["serviceAccountName"]
    return f"system:serviceaccount:{agent['metadata']['namespace']}:{sa}"


def admit(
    old: dict[str, Any], new: dict[str, Any], *, username: str | None = None, node: str | None = ""
) -> tuple[bool, list[str]]:
    """(matched, names of failed validations) for a node UPDATE by `username` (default: the
    agent) whose token says it runs on `node` ("" = the node being updated, None = no extra)."""
    policy = _policy()["spec"]
    user: dict[str, Any] = {"username": username or agent_username(), "groups": []}
    if node is not None:
        user["extra"] = {NODE_NAME_EXTRA: [node or new["metadata"]["name"]]}
    request = {"operation": "UPDATE", "userInfo": user, "name": new["metadata"]["name"]}
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(new),
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel(request),
    }
    if not all(_true(_program(c["expression"]), activation) for c in policy["matchConditions"]):
        return False, []
    variables: dict[celtypes.StringType, Any] = {}
    for variable in policy["variables"]:
        activation["variables"] = celtypes.MapType(variables)
        variables[celtypes.StringType(variable["name"])] = _program(
            variable["expression"]
        ).evaluate(activation)
    activation["variables"] = celtypes.MapType(variables)
    failed = [
        v["message"]
        for v in policy["validations"]
        if not _true(_program(v["expression"]), activation)
    ]
    return True, failed


def node(name: str = "gpu-node-1") -> dict[str, Any]:
    """A Node as a kubeadm cluster with the GPU Operator has it."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": "6e0cd9b5-0f7e-4b43-9bd2-6f4b1c3d2a10",
            "resourceVersion": "418230",
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.present": "true",
                "node-role.kubernetes.io/gpu-worker": "",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {
            "podCIDR": "10.244.3.0/24",
            "podCIDRs": ["10.244.3.0/24"],
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        "status": {"capacity": {"cpu": "224", "nvidia.com/gpu": "8"}},
    }


def with_labels(n: dict[str, Any], **changes: str | None) -> dict[str, Any]:
    """A copy with labels set (a value) or removed (None); keys given as Label attribute
    names are resolved through common.vocabulary."""
    out = copy.deepcopy(n)
    for key, value in changes.items():
        key = getattr(Label, key, key)
        if value is None:
            out["metadata"]["labels"].pop(key, None)
        else:
            out["metadata"]["labels"][key] = value
    return out


def agent_synced(n: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(n)
    out["metadata"]["labels"].update(
        {
            Label.GPUS: "8",
            Label.GPU_NIC_PAIRS: "8",
            Label.GPU_NIC_LINK: "PIX",
            dataset_label("imagenet"): "2024-06",
        }
    )
    out["metadata"]["annotations"][TOPOLOGY_ANNOTATION] = json.dumps({"sockets": 2})
    return out


def test_agent_adding_and_changing_its_own_labels_and_annotation_passes() -> None:
    before = node()
    after = agent_synced(before)
    assert admit(before, after) == (True, [])
    changed = with_labels(after, GPU_NIC_PAIRS="7", GPU_NIC_LINK="PXB")
    assert admit(after, changed) == (True, [])


def test_agent_cleanup_removing_everything_it_owns_passes() -> None:
    synced = agent_synced(node())
    assert admit(synced, node()) == (True, [])


def test_a_node_without_any_labels_or_annotations_is_handled() -> None:
    bare = node()
    del bare["metadata"]["labels"], bare["metadata"]["annotations"]
    labelled = copy.deepcopy(bare)
    labelled["metadata"]["labels"] = {Label.GPUS: "0"}
    assert admit(bare, labelled) == (True, [])


@pytest.mark.parametrize(
    "key",
    [
        "kubernetes.io/hostname",  # changing a foreign label
        "node-role.kubernetes.io/gpu-worker",
    ],
)
def test_agent_changing_or_removing_a_foreign_label_is_denied(key: str) -> None:
    before = node()
    matched, failed = admit(before, with_labels(before, **{key: "evil"}))
    assert matched and len(failed) == 1 and "labels" in failed[0]
    matched, failed = admit(before, with_labels(before, **{key: None}))
    assert matched and len(failed) == 1 and "labels" in failed[0]


@pytest.mark.parametrize(
    "key", ["nvidia.com/gpu.count", "xtopoplace.io/gpus", "topoplace.io.evil/gpus", "topoplace.io"]
)
def test_agent_adding_a_look_alike_label_is_denied(key: str) -> None:
    before = node()
    matched, failed = admit(before, with_labels(before, **{key: "8"}))
    assert matched and len(failed) == 1


def test_agent_adding_an_annotation_outside_its_prefixes_is_denied() -> None:
    before = node()
    after = copy.deepcopy(before)
    after["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/scale-down-disabled"] = (
        "true"
    )
    matched, failed = admit(before, after)
    assert matched and len(failed) == 1 and "annotations" in failed[0]


def test_agent_adding_a_taint_is_denied() -> None:
    before = node()
    after = copy.deepcopy(before)
    after["spec"]["taints"].append({"key": "topoplace.io/draining", "effect": "NoSchedule"})
    matched, failed = admit(before, after)
    assert matched and len(failed) == 1 and "spec" in failed[0]


@pytest.mark.parametrize(
    ("field", "value"), [("unschedulable", True), ("podCIDR", "10.0.0.0/8"), ("providerID", "x")]
)
def test_agent_changing_spec_is_denied(field: str, value: object) -> None:
    before = node()
    after = copy.deepcopy(before)
    after["spec"][field] = value
    matched, failed = admit(before, after)
    assert matched and len(failed) == 1 and "spec" in failed[0]


def test_agent_adding_a_finalizer_is_denied() -> None:
    before = node()
    after = copy.deepcopy(before)
    after["metadata"]["finalizers"] = ["topoplace.io/keep"]
    matched, failed = admit(before, after)
    assert matched and len(failed) == 1 and "finalizers" in failed[0]


def test_agent_labelling_another_node_is_denied_when_the_token_names_its_node() -> None:
    before = node("gpu-node-2")
    matched, failed = admit(before, agent_synced(before), node="gpu-node-1")
    assert matched and len(failed) == 1 and "runs on" in failed[0]


def test_without_the_node_name_in_the_token_the_other_rules_still_apply() -> None:
    # Clusters before Kubernetes 1.30 do not put the node name in service account tokens.
    before = node("gpu-node-2")
    assert admit(before, agent_synced(before), node=None) == (True, [])
    matched, failed = admit(
        before, with_labels(before, **{"kubernetes.io/os": "windows"}), node=None
    )
    assert matched and len(failed) == 1


@pytest.mark.parametrize(
    "username",
    [
        "system:node:gpu-node-1",  # the kubelet
        "system:serviceaccount:kube-system:node-controller",
        "system:serviceaccount:other-namespace:topoplace-agent",
        "admin",
    ],
)
def test_other_users_are_not_matched(username: str) -> None:
    before = node()
    after = copy.deepcopy(before)
    after["spec"]["unschedulable"] = True
    assert admit(before, after, username=username) == (False, [])


def test_the_prefixes_in_the_expressions_are_the_agents_vocabulary() -> None:
    spec = _policy()["spec"]
    text = " ".join(v["expression"] for v in spec["validations"])
    assert set(re.findall(r"startsWith\('([^']*)'\)", text)) == {LABEL_PREFIX, DATASET_PREFIX}


def test_the_policy_is_bound_denying_and_scoped_to_the_main_node_resource() -> None:
    spec = _policy()["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["nodes"] and rule["operations"] == ["UPDATE"]
    binding = render().one("ValidatingAdmissionPolicyBinding", "topoplace-agent-node-scope")
    assert binding["spec"]["policyName"] == "topoplace-agent-node-scope"
    assert binding["spec"]["validationActions"] == ["Deny"]
