"""placement.numaAwareScheduler: the pod is handed to the NUMA-aware scheduler, once, and a
scheduler the user chose is kept with a warning."""

from __future__ import annotations

import pytest

from tests.webhook.builders import SETTINGS, check_mutation, container, make_pod, policy_doc
from webhook.engine.recipe import mutate

NUMA = {
    "singleNumaNode": True,
    "topologyManagerPolicies": ["single-numa-node"],
    "numaAwareScheduler": "topoplace-numa-scheduler",
}


@pytest.mark.parametrize("given", [None, "default-scheduler"])
def test_default_scheduler_is_replaced(policies, given):
    extra = {} if given is None else {"schedulerName": given}
    pod = make_pod(container(gpus=4), **extra)
    result = mutate(pod, "ml-team", policies(policy_doc("p", placement=NUMA)), SETTINGS)
    assert check_mutation(pod, result)["spec"]["schedulerName"] == "topoplace-numa-scheduler"
    assert not [w for w in result.warnings if "schedulerName" in w]


def test_second_pass_is_empty(policies):
    loaded = policies(policy_doc("p", placement=NUMA))
    first = mutate(make_pod(container(gpus=4)), "ml-team", loaded, SETTINGS)
    again = mutate(first.pod, "ml-team", loaded, SETTINGS)
    assert again.patch == []


def test_users_own_scheduler_is_kept_with_a_warning(policies):
    pod = make_pod(container(gpus=4), schedulerName="volcano")
    result = mutate(pod, "ml-team", policies(policy_doc("p", placement=NUMA)), SETTINGS)
    assert check_mutation(pod, result)["spec"]["schedulerName"] == "volcano"
    assert any(
        "spec.schedulerName 'volcano' kept" in w and "topoplace-numa-scheduler" in w
        for w in result.warnings
    )


def test_policy_without_the_field_leaves_the_scheduler_alone(policies):
    pod = make_pod(container(gpus=4))
    placement = {"singleNumaNode": True}
    result = mutate(pod, "ml-team", policies(policy_doc("p", placement=placement)), SETTINGS)
    assert "schedulerName" not in result.pod["spec"]
