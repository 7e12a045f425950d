"""The spec.dra block: what a DRA policy must say, and every error naming file, document, field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import pytest

from tests.webhook.builders import policy_doc, write_yaml
from webhook.policy.cel import CEL_MAX_LENGTH, cel_syntax_problem
from webhook.policy.loader import PolicyLoadError, load_policy_dir

GPU = {"deviceClassName": "gpu.nvidia.com"}
NIC = {"deviceClassName": "dranet", "selector": 'device.attributes["dra.net"].rdma == true'}


def dra(**fields: Any) -> dict[str, Any]:
    return {"gpu": GPU, "nic": NIC, "gpuCounts": [1, 2, 4, 8], **fields}


def errors(tmp_path: Path, doc: dict[str, Any]) -> list[str]:
    write_yaml(tmp_path / "dra.yaml", policy_doc("other"), doc)
    with pytest.raises(PolicyLoadError) as caught:
        load_policy_dir(tmp_path)
    return caught.value.messages


def test_a_full_dra_policy_loads(tmp_path: Path) -> None:
    write_yaml(tmp_path / "dra.yaml", policy_doc("p", namespaces=["ml-*"], dra=dra()))
    policy = load_policy_dir(tmp_path)["p"]
    assert policy.spec.dra is not None
    assert policy.spec.dra.align == "pcieRoot"  # the default
    assert policy.spec.dra.attribute == "resource.kubernetes.io/pcieRoot"


REJECTED = [
    ("no namespaces", {}, dra(), "spec.dra: a DRA policy must list spec.namespaces"),
    ("align word", {"namespaces": ["a"]}, dra(align="pci"), "spec.dra.align: Input should be"),
    ("zero count", {"namespaces": ["a"]}, dra(gpuCounts=[0]), "spec.dra.gpuCounts[0]"),
    ("no counts", {"namespaces": ["a"]}, dra(gpuCounts=[]), "spec.dra.gpuCounts"),
    ("repeated", {"namespaces": ["a"]}, dra(gpuCounts=[2, 2]), "repeats a count"),
    ("too many", {"namespaces": ["a"]}, dra(gpuCounts=[17]), "[17] above 16"),
    ("bool count", {"namespaces": ["a"]}, dra(gpuCounts=[True]), "spec.dra.gpuCounts[0]"),
    (
        "cel typo",
        {"namespaces": ["a"]},
        dra(nic={**NIC, "selector": 'device.attributes["dra.net"].rdma =='}),
        "spec.dra.nic.selector: not a CEL expression: CEL expression ends with an operator",
    ),
    (
        "class name",
        {"namespaces": ["a"]},
        dra(gpu={"deviceClassName": "GPU_class"}),
        "spec.dra.gpu.deviceClassName: 'GPU_class' is not a DeviceClass name",
    ),
    ("unknown field", {"namespaces": ["a"]}, dra(pairs=True), "spec.dra.pairs: unknown field"),
    ("no gpu", {"namespaces": ["a"]}, {"gpuCounts": [1]}, "spec.dra.gpu: Field required"),
]


@pytest.mark.parametrize(
    ("what", "spec", "block", "expected"), REJECTED, ids=[r[0] for r in REJECTED]
)
def test_mistakes_name_file_document_and_field(
    tmp_path: Path, what: str, spec: dict[str, Any], block: dict[str, Any], expected: str
) -> None:
    (message,) = errors(tmp_path, policy_doc("p", **spec, dra=block))
    assert message.startswith(f"{tmp_path / 'dra.yaml'}: line ")
    assert " document 2 (p): " in message and expected in message, message


def test_sixteen_gpus_fit_with_nics_and_thirty_two_without(tmp_path: Path) -> None:
    gpus_only = {"gpu": GPU, "gpuCounts": [32]}
    write_yaml(tmp_path / "a.yaml", policy_doc("a", namespaces=["x"], dra=dra(gpuCounts=[16])))
    write_yaml(tmp_path / "b.yaml", policy_doc("b", namespaces=["x"], dra=gpus_only))
    assert len(load_policy_dir(tmp_path)) == 2


def test_policy_names_must_make_valid_template_names(tmp_path: Path) -> None:
    (message,) = errors(tmp_path, policy_doc("Big_Name", namespaces=["a"], dra=dra()))
    assert "(Big_Name): spec: metadata.name 'Big_Name' cannot name DRA templates" in message


GOOD_CEL = [
    'device.attributes["dra.net"].rdma == true',
    'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].index < 4',
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
    "'mlx5' in device.attributes['dra.net'].ifName ? true : false",
    "!(device.attributes['dra.net'].virtual) || -1 < 0",
    "[1, 2, 3].all(x, x > 0) && {'a': 1}.a == 1",
    "r'raw' + '''triple''' == b\"x\" // a comment",
]
BAD_CEL = [
    "",
    "device.attributes['dra.net'].rdma ==",
    "device.attributes['dra.net'.rdma",
    "device.driver == 'gpu.nvidia.com",
    "device driver",
    "&& true",
    "a, b",
    "device.attributes)",
    "device.#x",
    "a.",
]


@pytest.mark.parametrize("expression", GOOD_CEL)
def test_cel_that_parses_is_accepted(expression: str) -> None:
    celpy.Environment().compile(expression)  # the oracle: a full CEL parser
    assert cel_syntax_problem(expression) is None


@pytest.mark.parametrize("expression", BAD_CEL)
def test_cel_that_does_not_parse_is_refused(expression: str) -> None:
    with pytest.raises(celpy.CELParseError):
        celpy.Environment().compile(expression)
    assert cel_syntax_problem(expression) is not None


def test_cel_longer_than_the_api_server_allows_is_refused() -> None:
    long = " || ".join(["device.driver == 'x'"] * (CEL_MAX_LENGTH // 20 + 1))
    assert "longer than" in (cel_syntax_problem(long) or "")
