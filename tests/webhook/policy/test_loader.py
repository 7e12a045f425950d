"""Loading policy directories: ConfigMap layout, hashing, and one clear message per mistake."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.webhook.builders import policy_doc, write_yaml
from webhook.policy.loader import PolicyLoadError, load_policy_dir


def load_errors(directory: Path) -> list[str]:
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dir(directory)
    return info.value.messages


def test_multi_document_files_and_empty_documents(tmp_path):
    (tmp_path / "a.yaml").write_text(
        "---\n# only a comment\n---\n"
        "apiVersion: topoplace.io/v1alpha1\nkind: PlacementPolicy\nmetadata: {name: one}\n"
        "---\n---\n"
        "apiVersion: topoplace.io/v1alpha1\nkind: PlacementPolicy\nmetadata: {name: two}\n"
    )
    write_yaml(tmp_path / "b.yaml", policy_doc("three", onMissing="deny"))
    (tmp_path / "notes.txt").write_text("not a policy")
    policies = load_policy_dir(tmp_path)
    assert len(policies) == 3 and policies.names == ("one", "three", "two")
    assert policies["three"].spec.on_missing == "deny"
    assert str(policies.origins["two"]) == f"{tmp_path / 'a.yaml'} document 4"


def test_configmap_volume_layout_reads_each_policy_once(tmp_path):
    # What the kubelet writes: ..<timestamp>/ with the files, ..data -> it, and per-key links.
    generation = tmp_path / "..2026_11_29_10_00_00.123"
    generation.mkdir()
    write_yaml(generation / "ddp.yaml", policy_doc("ddp"))
    write_yaml(generation / "infer.yaml", policy_doc("infer"))
    os.symlink(generation.name, tmp_path / "..data")
    for name in ("ddp.yaml", "infer.yaml"):
        os.symlink(f"..data/{name}", tmp_path / name)
    write_yaml(tmp_path / ".hidden.yaml", policy_doc("hidden"))
    policies = load_policy_dir(tmp_path)
    assert policies.names == ("ddp", "infer")
    assert len(policies.files) == 2


def test_hashes_ignore_formatting_and_follow_content(tmp_path):
    one, two, three = (tmp_path / n for n in ("one", "two", "three"))
    for d in (one, two, three):
        d.mkdir()
    write_yaml(one / "p.yaml", policy_doc("p", env={"A": "1"}, onMissing="warn"))
    (two / "p.yaml").write_text(
        "# reformatted, defaults spelled out differently\n"
        "kind: PlacementPolicy\napiVersion: topoplace.io/v1alpha1\n"
        "spec: {env: {A: 1}}\nmetadata: {name: p}\n"
    )
    write_yaml(three / "p.yaml", policy_doc("p", env={"A": "2"}))
    a, b, c = (load_policy_dir(d) for d in (one, two, three))
    assert a.hash_of("p") == b.hash_of("p") != c.hash_of("p")
    assert a.generation_hash == b.generation_hash != c.generation_hash


def test_a_thousand_policies_load_and_look_up_by_name(tmp_path):
    write_yaml(tmp_path / "many.yaml", *(policy_doc(f"team-{i}") for i in range(1000)))
    policies = load_policy_dir(tmp_path)
    assert len(policies) == 1000 and "team-999" in policies
    assert policies.get("team-500").name == "team-500" and policies.get("nope") is None


def test_missing_directory(tmp_path):
    (message,) = load_errors(tmp_path / "absent")
    assert "absent" in message and "not a directory" in message


# --- one clear message per mistake -------------------------------------------------------


def test_wrong_type_names_file_document_line_and_field(tmp_path):
    (tmp_path / "bad.yaml").write_text(
        "apiVersion: topoplace.io/v1alpha1\n"
        "kind: PlacementPolicy\n"
        "metadata: {name: ddp}\n"
        "spec:\n"
        "  resources:\n"
        "    cpuPerGpu: twelve\n"
    )
    (message,) = load_errors(tmp_path)
    assert message.startswith(f"{tmp_path / 'bad.yaml'}: line 6 document 1 (ddp): ")
    assert "spec.resources.cpuPerGpu" in message and "decimal" in message and "twelve" in message


def test_unknown_field_is_named(tmp_path):
    write_yaml(tmp_path / "p.yaml", policy_doc("p", placement={"gpuNicLnk": "PIX"}))
    (message,) = load_errors(tmp_path)
    assert "spec.placement.gpuNicLnk" in message and "unknown field" in message


def test_invalid_dataset_name_and_version(tmp_path):
    dataset = {"name": "image net", "version": "v1/2", "source": "s3://b/x", "mountPath": "/d"}
    write_yaml(tmp_path / "p.yaml", policy_doc("p", datasets=[dataset]))
    messages = load_errors(tmp_path)
    assert len(messages) == 2
    assert "spec.datasets[0].name" in messages[0] and "'image net'" in messages[0]
    assert "spec.datasets[0].version" in messages[1] and "'v1/2'" in messages[1]


def test_duplicate_names_across_files_name_both_places(tmp_path):
    write_yaml(tmp_path / "a.yaml", policy_doc("shared"))
    write_yaml(tmp_path / "b.yaml", policy_doc("other"), policy_doc("shared"))
    (message,) = load_errors(tmp_path)
    assert f"{tmp_path / 'b.yaml'} document 2" in message
    assert f"{tmp_path / 'a.yaml'} document 1" in message and "'shared'" in message


def test_duplicate_names_within_one_file(tmp_path):
    write_yaml(tmp_path / "a.yaml", policy_doc("x"), policy_doc("x"))
    (message,) = load_errors(tmp_path)
    assert "document 2" in message and "document 1" in message and "duplicate" in message


def test_broken_yaml_names_file_and_line(tmp_path):
    (tmp_path / "broken.yaml").write_text(
        "apiVersion: topoplace.io/v1alpha1\nkind: PlacementPolicy\nmetadata:\n  name: [x\n"
    )
    (message,) = load_errors(tmp_path)
    assert message.startswith(f"{tmp_path / 'broken.yaml'}: line ")
    assert "invalid YAML" in message


def test_document_that_is_not_a_mapping(tmp_path):
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (message,) = load_errors(tmp_path)
    assert "list.yaml" in message and "document 1" in message and "mapping" in message


def test_errors_from_several_files_are_all_reported(tmp_path):
    write_yaml(tmp_path / "a.yaml", policy_doc("a", onMissing="explode"))
    write_yaml(tmp_path / "b.yaml", {**policy_doc("b"), "kind": "ConfigMap"})
    write_yaml(tmp_path / "c.yaml", policy_doc("c"))
    messages = load_errors(tmp_path)
    assert len(messages) == 2
    assert "a.yaml" in messages[0] and "spec.onMissing" in messages[0]
    assert "b.yaml" in messages[1] and "kind" in messages[1] and "PlacementPolicy" in messages[1]


def test_repeated_key_is_an_error_not_a_silent_override(tmp_path):
    (tmp_path / "dup.yaml").write_text(
        "apiVersion: topoplace.io/v1alpha1\n"
        "kind: PlacementPolicy\n"
        "metadata: {name: p}\n"
        "spec:\n"
        "  resources: {cpuPerGpu: 8}\n"
        "  onMissing: warn\n"
        "  resources: {memoryPerGpu: 8Gi}\n"
    )
    (message,) = load_errors(tmp_path)
    assert message.startswith(f"{tmp_path / 'dup.yaml'}: line 7 document 1")
    assert "duplicate key 'resources'" in message and "line 5" in message
