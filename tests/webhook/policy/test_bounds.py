"""What `validate` accepts, `serve` can apply: every number in a policy is finite and within
its documented bound (docs/policies.md, "Bounds"), refused at load with one line naming the
file, the document and the field; a policy file is read within its YAML bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.common.test_yaml_input import laughs
from tests.webhook.builders import SETTINGS, check_mutation, container, make_pod
from webhook.engine.recipe import mutate
from webhook.policy.loader import PolicyLoadError, load_policy_dir

HEAD = "apiVersion: topoplace.io/v1alpha1\nkind: PlacementPolicy\nmetadata: {name: p}\nspec:\n"


def policy_file(tmp_path: Path, resources: str) -> Path:
    (tmp_path / "p.yaml").write_text(HEAD + "  resources:\n" + resources)
    return tmp_path / "p.yaml"


def refusal(tmp_path: Path, resources: str) -> str:
    path = policy_file(tmp_path, resources)
    with pytest.raises(PolicyLoadError) as caught:
        load_policy_dir(tmp_path)
    (message,) = caught.value.messages
    assert message.startswith(f"{path}: line ") and " document 1 (p): spec.resources." in message
    assert "\n" not in message
    return message


# (the resources section, the field and the words of its one error line)
REFUSED = [
    ("    memoryPerGpu: 1.0e+400\n", "memoryPerGpu: expected a finite quantity, got inf"),
    ("    memoryPerGpu: .nan\n", "memoryPerGpu: expected a finite quantity, got nan"),
    ("    memoryPerGpu: -.inf\n", "memoryPerGpu: expected a finite quantity"),
    ("    memoryPerGpu: '1.0e+400'\n", "memoryPerGpu: must be from 1Mi to 64Ti"),
    ("    memoryPerGpu: 1e999999999\n", "memoryPerGpu: quantity '1e999999999' is out of range"),
    ("    memoryPerGpu: 1n\n", "memoryPerGpu: must be from 1Mi to 64Ti"),
    ("    memoryPerGpu: 1023Ki\n", "memoryPerGpu: must be from 1Mi to 64Ti"),
    ("    memoryPerGpu: 65Ti\n", "memoryPerGpu: must be from 1Mi to 64Ti"),
    ("    memoryPerGpu: 0\n", "memoryPerGpu: must be a positive quantity"),
    ("    cpuPerGpu: 1e30\n", "cpuPerGpu: Input should be less than or equal to 8192"),
    ("    cpuPerGpu: 8193\n", "cpuPerGpu: Input should be less than or equal to 8192"),
    ("    cpuPerGpu: .nan\n", "cpuPerGpu: Input should be a finite number"),
    ("    cpuPerGpu: .inf\n", "cpuPerGpu: Input should be a finite number"),
    ("    cpuPerGpu: 0.0001\n", "cpuPerGpu: Input should be greater than or equal to 0.001"),
    ("    cpuPerGpu: 1e-999999999\n", "cpuPerGpu: Input should be greater than or equal"),
    (
        "    rdma: {resource: rdma/ib, perGpu: 1000000000000000000000}\n",
        "rdma.perGpu: Input should be less than or equal to 1024",
    ),
    ("    rdma: {resource: rdma/ib, perGpu: 1025}\n", "rdma.perGpu: Input should be less than"),
    (
        "    rdma: {resource: rdma/ib, wholeNumaNodes: {gpus: 1025, nics: 1}}\n",
        "rdma.wholeNumaNodes.gpus: Input should be less than or equal to 1024",
    ),
    (
        "    rdma: {resource: rdma/ib, wholeNumaNodes: {gpus: 4, nics: 2000}}\n",
        "rdma.wholeNumaNodes.nics: Input should be less than or equal to 1024",
    ),
    (
        "    wholeNumaNodes: {gpus: 4, cpu: 1e30}\n",
        "wholeNumaNodes.cpu: Input should be less than or equal to 8192",
    ),
    ("    wholeNumaNodes: {gpus: 4, memory: 1n}\n", "wholeNumaNodes.memory: must be from 1Mi"),
    ("    wholeNumaNodes: {gpus: 4, memory: .nan}\n", "wholeNumaNodes.memory: expected a finite"),
    ("    wholeNumaNodes: {gpus: 2048, cpu: 8}\n", "wholeNumaNodes.gpus: Input should be less"),
]


@pytest.mark.parametrize(("resources", "says"), REFUSED, ids=[r[0].strip() for r in REFUSED])
def test_a_number_serve_could_not_apply_is_refused_at_load(
    tmp_path: Path, resources: str, says: str
) -> None:
    assert says in refusal(tmp_path, resources)


# The bounds themselves are accepted, and mutate a pod without an exception.
ACCEPTED = [
    "    cpuPerGpu: 8192\n    memoryPerGpu: 64Ti\n",
    "    cpuPerGpu: 0.001\n    memoryPerGpu: 1Mi\n",
    "    cpuPerGpu: '8'\n    memoryPerGpu: 1048576\n",
    "    cpuPerGpu: 4\n    rdma: {resource: rdma/ib, perGpu: 1024}\n",
    "    wholeNumaNodes: {gpus: 1024, cpu: 8192, memory: 64Ti}\n",
    "    rdma: {resource: rdma/ib, wholeNumaNodes: {gpus: 1024, nics: 1024}}\n",
]


@pytest.mark.parametrize("resources", ACCEPTED, ids=[r.strip() for r in ACCEPTED])
def test_numbers_at_the_bounds_load_and_mutate(tmp_path: Path, resources: str) -> None:
    policy_file(tmp_path, resources)
    policies = load_policy_dir(tmp_path)
    for gpus in (1, 8):
        pod = make_pod(container(gpus=gpus))
        result = mutate(pod, "ml-team", policies, SETTINGS)
        assert result.allowed and result.patch
        check_mutation(pod, result)


def test_an_alias_bomb_policy_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bomb.yaml").write_text(HEAD + "  env: {}\n" + laughs(9))
    (tmp_path / "good.yaml").write_text(HEAD.replace("name: p", "name: good") + "  env: {}\n")
    with pytest.raises(PolicyLoadError) as caught:
        load_policy_dir(tmp_path)
    assert caught.value.messages == [
        f"{tmp_path / 'bomb.yaml'}: line 11: YAML aliases expand to more than 100,000 nodes "
        "(an alias bomb?); write the repeated parts out"
    ]


def test_aliases_within_bounds_still_load_and_duplicates_are_found_once(tmp_path: Path) -> None:
    # The duplicate-key walk sees the aliased mapping once, however often it is used.
    (tmp_path / "p.yaml").write_text(HEAD + "  env: &e {A: '1', A: '2'}\n  x: [*e, *e, *e]\n")
    with pytest.raises(PolicyLoadError) as caught:
        load_policy_dir(tmp_path)
    assert [m for m in caught.value.messages if "duplicate key" in m] == [
        f"{tmp_path / 'p.yaml'}: line 5 document 1: duplicate key 'A' (first at line 5); "
        "only one is allowed"
    ]
    (tmp_path / "p.yaml").write_text(
        HEAD
        + "  resources: &r {cpuPerGpu: 4}\n---\n"
        + HEAD.replace("name: p", "name: q")
        + "  resources: {cpuPerGpu: 4}\n"
    )
    assert load_policy_dir(tmp_path).names == ("p", "q")


def test_a_policy_file_past_1_mib_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "big.yaml").write_text(HEAD + "  env: {}\n" + "# padding\n" * 110_000)
    with pytest.raises(PolicyLoadError) as caught:
        load_policy_dir(tmp_path)
    assert caught.value.messages == [
        f"{tmp_path / 'big.yaml'}: larger than 1 MiB, the most a policy file may hold"
    ]


def test_a_deeply_nested_policy_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(HEAD + "  env: " + "[" * 150 + "]" * 150 + "\n")
    with pytest.raises(PolicyLoadError) as caught:
        load_policy_dir(tmp_path)
    assert caught.value.messages == [
        f"{tmp_path / 'p.yaml'}: line 5: nested deeper than 100 levels, the most a policy file "
        "may hold"
    ]
