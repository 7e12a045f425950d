"""Template bodies: the requests, constraints and labels a DRA policy's pods rely on."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kube import assert_valid
from tests.webhook.builders import policy_doc
from webhook.claims.templates import (
    HASH_ANNOTATION,
    MANAGED_BY,
    build_template,
    desired_templates,
    plan_changes,
    templates_for_pod,
)
from webhook.policy.model import PlacementPolicy

PCIE = "resource.kubernetes.io/pcieRoot"
NUMA = "resource.kubernetes.io/numaNode"
SELECTOR = 'device.attributes["dra.net"].rdma == true'


def dra_policy(name: str = "p", *, nic: bool = True, **spec: Any) -> PlacementPolicy:
    dra: dict[str, Any] = {"gpu": {"deviceClassName": "gpu.nvidia.com"}, "gpuCounts": [1, 2, 8]}
    if nic:
        dra["nic"] = {"deviceClassName": "dranet", "selector": SELECTOR}
    dra.update(spec.pop("dra", {}))
    return PlacementPolicy.model_validate(
        policy_doc(name, namespaces=spec.pop("namespaces", ["ml-*"]), dra=dra, **spec)
    )


def test_each_gpu_has_its_own_nic_on_the_same_pcie_root() -> None:
    template = build_template(dra_policy(), 2, "ml-a")
    assert_valid(template)
    assert template["metadata"]["name"] == "topoplace-p-2gpu"
    assert template["metadata"]["namespace"] == "ml-a"
    devices = template["spec"]["spec"]["devices"]
    assert [r["name"] for r in devices["requests"]] == ["gpu-0", "gpu-1", "nic-0", "nic-1"]
    assert devices["requests"][0]["exactly"] == {"deviceClassName": "gpu.nvidia.com", "count": 1}
    assert devices["requests"][2]["exactly"] == {
        "deviceClassName": "dranet",
        "count": 1,
        "selectors": [{"cel": {"expression": SELECTOR}}],
    }
    assert devices["constraints"] == [
        {"requests": ["gpu-0", "nic-0"], "matchAttribute": PCIE},
        {"requests": ["gpu-1", "nic-1"], "matchAttribute": PCIE},
    ]


def test_single_numa_node_adds_one_constraint_over_every_device() -> None:
    policy = dra_policy(placement={"singleNumaNode": True}, dra={"align": "numaNode"})
    devices = build_template(policy, 4, "ml-a")["spec"]["spec"]["devices"]
    assert devices["constraints"][:4] == [
        {"requests": [f"gpu-{i}", f"nic-{i}"], "matchAttribute": NUMA} for i in range(4)
    ]
    everything = [f"gpu-{i}" for i in range(4)] + [f"nic-{i}" for i in range(4)]
    assert devices["constraints"][4:] == [{"requests": everything, "matchAttribute": NUMA}]


def test_gpus_only_policy_has_no_pair_constraints() -> None:
    template = build_template(dra_policy(nic=False), 8, "ml-a")
    assert_valid(template)
    devices = template["spec"]["spec"]["devices"]
    assert len(devices["requests"]) == 8 and "constraints" not in devices


def test_the_largest_count_a_claim_can_hold_is_still_valid() -> None:
    template = build_template(dra_policy(dra={"gpuCounts": [16]}), 16, "ml-a")
    assert_valid(template)
    assert len(template["spec"]["spec"]["devices"]["requests"]) == 32


def test_templates_are_labelled_managed_by_topoplace_and_hashed() -> None:
    meta = build_template(dra_policy(), 1, "ml-a")["metadata"]
    assert meta["labels"][MANAGED_BY[0]] == MANAGED_BY[1]
    assert meta["labels"]["topoplace.io/policy"] == "p"
    other = build_template(dra_policy(dra={"align": "numaNode"}), 1, "ml-a")["metadata"]
    assert meta["annotations"][HASH_ANNOTATION] != other["annotations"][HASH_ANNOTATION]


def test_only_matching_namespaces_and_dra_policies_get_templates() -> None:
    plain = PlacementPolicy.model_validate(policy_doc("plain"))
    wanted = desired_templates(
        [dra_policy("a"), dra_policy("b", namespaces=["team-b"]), plain],
        ["ml-x", "team-b", "default"],
    )
    assert sorted(wanted) == [
        ("ml-x", "topoplace-a-1gpu"),
        ("ml-x", "topoplace-a-2gpu"),
        ("ml-x", "topoplace-a-8gpu"),
        ("team-b", "topoplace-b-1gpu"),
        ("team-b", "topoplace-b-2gpu"),
        ("team-b", "topoplace-b-8gpu"),
    ]


def _listed(body: dict[str, Any], version: str = "7") -> dict[str, Any]:
    return {**body, "metadata": {**body["metadata"], "resourceVersion": version}}


def test_plan_creates_missing_deletes_unwanted_and_replaces_stale() -> None:
    new = dra_policy(dra={"gpuCounts": [1, 2]})
    old = dra_policy(dra={"gpuCounts": [1, 2, 8], "align": "numaNode"})
    wanted = desired_templates([new], ["ml-a"])
    owned = [
        _listed(build_template(new, 1, "ml-a")),  # up to date: kept
        _listed(build_template(old, 2, "ml-a"), "8"),  # stale hash: deleted (created next pass)
        _listed(build_template(old, 8, "ml-a"), "9"),  # no longer wanted
    ]
    plan = plan_changes(wanted, owned)
    assert sorted(plan.delete) == [
        ("ml-a", "topoplace-p-2gpu", "8"),
        ("ml-a", "topoplace-p-8gpu", "9"),
    ]
    assert plan.create == []
    after = plan_changes(wanted, owned[:1])
    assert [b["metadata"]["name"] for b in after.create] == ["topoplace-p-2gpu"]
    assert not plan_changes(wanted, [*owned[:1], _listed(after.create[0])])


@pytest.mark.parametrize("count", [1, 3])
def test_template_for_one_device_has_no_numa_constraint(count: int) -> None:
    policy = dra_policy(nic=False, placement={"singleNumaNode": True}, dra={"gpuCounts": [count]})
    devices = build_template(policy, count, "ml-a")["spec"]["spec"]["devices"]
    assert ("constraints" in devices) == (count > 1)


def test_a_mutated_pod_names_the_templates_it_needs() -> None:
    from tests.webhook.builders import SETTINGS, container, make_pod
    from webhook.engine.recipe import mutate
    from webhook.policy.loader import PolicyOrigin, PolicySet

    policy = dra_policy()
    policies = PolicySet.build([(policy, PolicyOrigin("t.yaml", 1))])
    pod = make_pod(container("a", gpus=2), container("b", gpus=8), container("c", gpus=3))
    mutated = mutate(pod, "ml-a", policies, SETTINGS).pod
    needed = templates_for_pod(mutated, "ml-a", policies)
    assert needed == [build_template(policy, 2, "ml-a"), build_template(policy, 8, "ml-a")]
    assert templates_for_pod(pod, "ml-a", policies) == []  # not mutated: no claims yet
