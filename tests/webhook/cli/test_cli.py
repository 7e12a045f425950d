"""The offline commands as users run them: `python -m webhook mutate|validate|schema`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.kube import assert_valid, qos_class
from tests.webhook.builders import policy_doc, write_yaml
from webhook.vocabulary import APPLIED_ANNOTATION


@pytest.fixture
def cli(python: str, repo_root: Path):
    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(repo_root)}
        return subprocess.run(
            [python, "-m", "webhook", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            cwd=repo_root,
            timeout=60,
        )

    return run


def pod_templates_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if doc["kind"] == "Pod":
        return [doc]
    if doc["kind"] == "JobSet":
        return [j["template"]["spec"]["template"] for j in doc["spec"]["replicatedJobs"]]
    if doc["kind"] == "PyTorchJob":
        return [r["template"] for r in doc["spec"]["pytorchReplicaSpecs"].values()]
    return [doc["spec"]["template"]]


def as_pod(template: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", **template}


def test_shipped_policies_validate(cli):
    result = cli("validate", "policies")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "3 policies in 3 files OK"


def test_jobset_file_prints_the_mutated_jobset(cli):
    result = cli("mutate", "--policies", "policies", "examples/pods/jobset-ddp.yaml",
                 "--namespace", "ml-team")  # fmt: skip
    assert result.returncode == 0, result.stderr
    (doc,) = list(yaml.safe_load_all(result.stdout))
    assert doc["kind"] == "JobSet"
    (template,) = pod_templates_of(doc)
    script = template["spec"]["containers"][0]["command"][2]
    assert script.startswith("torchrun --numa-binding=exclusive --nnodes=4")
    pod = as_pod(template)
    assert APPLIED_ANNOTATION in pod["metadata"]["annotations"]
    assert_valid(pod)
    assert qos_class(pod) == "Guaranteed"


def test_stdin_multi_document_patch_output(cli, tmp_path):
    write_yaml(tmp_path / "p.yaml", policy_doc("p", env={"A": "1"}))
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{i}", "labels": {"topoplace.io/policy": "p"}},
            "spec": {
                "containers": [
                    {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}
                ]
            },
        }
        for i in range(2)
    ]
    text = yaml.safe_dump_all(pods)
    result = cli("mutate", "--policies", str(tmp_path), "-", "--output", "patch", stdin=text)
    assert result.returncode == 0, result.stderr
    decoder, rest, patches = json.JSONDecoder(), result.stdout.strip(), []
    while rest:
        patch, end = decoder.raw_decode(rest)
        patches.append(patch)
        rest = rest[end:].strip()
    assert len(patches) == 2
    for pod, patch in zip(pods, patches, strict=True):
        mutated = jsonpatch.apply_patch(pod, patch)
        assert qos_class(mutated) == "Guaranteed"
        assert mutated["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    # Workers with a GPU and no CPU/memory get the default, with one warning per pod.
    assert result.stderr.count("warning: Pod/p0: worker container c: sets no cpu or memory") == 1
    assert result.stderr.count("warning: Pod/p1: worker container c: sets no cpu or memory") == 1


def test_diff_output_shows_added_lines(cli):
    result = cli("mutate", "--policies", "policies", "examples/pods/multi-container-pod.yaml",
                 "--output", "diff")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "+    - --numa-binding=node" in result.stdout
    assert "--- Pod/finetune-* (input)" in result.stdout
    assert "warning: Pod/finetune-*: worker container trainer: cpu 10.5 rounded up" in result.stderr


def test_denied_pod_exits_1_with_reason_and_no_output(cli, tmp_path):
    write_yaml(tmp_path / "p.yaml", policy_doc("p", namespaces=["ml-*"], onMissing="deny"))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x", "namespace": "web", "labels": {"topoplace.io/policy": "p"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    result = cli("mutate", "--policies", str(tmp_path), "-", stdin=yaml.safe_dump(pod))
    assert result.returncode == 1
    assert result.stdout == ""
    assert "denied" in result.stderr and "'web'" in result.stderr


@pytest.mark.parametrize(("flag", "code"), [([], 0), (["--on-missing-policy", "deny"], 1)])
def test_a_pod_naming_no_loaded_policy_warns_or_is_denied(cli, tmp_path, flag, code):
    write_yaml(tmp_path / "p.yaml", policy_doc("p"))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x", "labels": {"topoplace.io/policy": "typo"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    result = cli("mutate", "--policies", str(tmp_path), *flag, "-", stdin=yaml.safe_dump(pod))
    assert result.returncode == code, result.stderr
    assert "'typo' does not exist" in result.stderr
    assert ("denied" in result.stderr) == (code == 1)


def test_a_relative_cache_root_is_refused(cli):
    result = cli("mutate", "--policies", "policies", "--dataset-cache-root", "cache",
                 "examples/pods/jobset-ddp.yaml")  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == (
        "error: --dataset-cache-root cache: must be an absolute path (it becomes a hostPath on "
        "the nodes)\n"
    )


def test_bad_policies_exit_2(cli, tmp_path):
    write_yaml(tmp_path / "p.yaml", policy_doc("p", resources={"cpuPerGpu": "x"}))
    result = cli("mutate", "--policies", str(tmp_path), "examples/pods/jobset-ddp.yaml")
    assert result.returncode == 2 and "spec.resources.cpuPerGpu" in result.stderr


def test_validate_lists_every_problem_and_fails(cli, tmp_path):
    write_yaml(
        tmp_path / "a.yaml", policy_doc("x"), policy_doc("a", placement={"gpuNicLink": "FAST"})
    )
    write_yaml(tmp_path / "b.yaml", policy_doc("x"))
    (tmp_path / "c.yaml").write_text("metadata: {name: [\n")
    result = cli("validate", str(tmp_path))
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == f"3 problems in {tmp_path}"
    assert any("a.yaml" in line and "spec.placement.gpuNicLink" in line for line in lines)
    assert any("c.yaml: line" in line and "invalid YAML" in line for line in lines)
    assert any("duplicate policy name 'x'" in line for line in lines)


def test_schema_is_json_schema_with_descriptions(cli):
    result = cli("schema")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert schema["title"] == "PlacementPolicy"
    assert schema["additionalProperties"] is False
    resources = schema["$defs"]["Resources"]["properties"]
    assert "cpuPerGpu" in resources and resources["cpuPerGpu"]["description"]


def test_validate_notes_pairs_that_need_the_whole_numa_node_or_dra(cli, tmp_path):
    rdma = {"rdma": {"resource": "rdma/ib"}}
    write_yaml(
        tmp_path / "a.yaml",
        policy_doc("pairs", placement={"gpuNicPairs": True}, resources=rdma),
        policy_doc("pix-link", placement={"gpuNicLink": "PIX"}, resources=rdma),
        policy_doc("link-only", placement={"gpuNicLink": "PXB"}),  # no NIC from the kubelet
        policy_doc("numa", placement={"gpuNicLink": "NODE"}, resources=rdma),
    )
    result = cli("validate", str(tmp_path))
    assert result.returncode == 0 and result.stdout.strip() == "4 policies in 1 file OK"
    notes = result.stderr.strip().splitlines()
    assert [n.split(": policy ")[1].split()[0] for n in notes] == ["pairs", "pix-link"]
    assert notes[0] == (
        f"note: {tmp_path}/a.yaml document 1: policy pairs asks for GPU↔NIC pairs without "
        "spec.dra: on the device-plugin path they hold only when a pod takes every NIC of its "
        "RDMA resource on its GPUs' NUMA nodes (docs/policies.md, What each path guarantees)"
    )


def test_validate_says_what_a_policy_does_on_aligning_kubelets(cli, tmp_path):
    write_yaml(
        tmp_path / "a.yaml",
        policy_doc(
            "full",
            placement={"topologyManagerPolicies": ["restricted"]},
            resources={"wholeNumaNodes": {"gpus": 4, "cpu": 100, "memory": "900Gi"}},
        ),
        policy_doc("calm", placement={"topologyManagerPolicies": ["best-effort"]}),
    )
    result = cli("validate", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (note,) = result.stderr.strip().splitlines()
    assert "policy full lets pods meet restricted kubelets" in note
    assert "4 GPUs: 100 CPUs, 900Gi; 8 GPUs: 200 CPUs, 1800Gi" in note


def test_validate_refuses_two_rules_for_one_amount(cli, tmp_path):
    write_yaml(
        tmp_path / "a.yaml",
        policy_doc("both", resources={"cpuPerGpu": 12, "wholeNumaNodes": {"gpus": 4, "cpu": 100}}),
    )
    result = cli("validate", str(tmp_path))
    assert result.returncode == 1
    assert "wholeNumaNodes.cpu and cpuPerGpu both say how much cpu a worker gets" in result.stderr
