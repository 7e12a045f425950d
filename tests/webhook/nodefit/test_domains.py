"""explain for a workload under keepTogether: per domain, how many of its pods fit, from the
per-node verdicts (a nodes file; the CLI's table and JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.webhook.builders import policy_doc, write_yaml
from tests.webhook.cli.test_explain_kubeconfig import run
from webhook.cli.main import main as webhook_main

T1, T2 = "topoplace.io/network-tier-1", "topoplace.io/network-tier-2"


def _node(name: str, block: str, gpus: int, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {T2: block, T1: f"{block}.s", **labels}},
        "status": {
            "allocatable": {
                "cpu": "16",
                "memory": "64Gi",
                "pods": "110",
                "nvidia.com/gpu": str(gpus),
            }
        },
    }


def _files(tmp_path: Path, parallelism: int) -> tuple[Path, Path, Path]:
    nodes = [
        _node("a1", "b1", 2),
        _node("a2", "b1", 2),
        _node("c1", "b2", 1),
        _node("c2", "b2", 2),
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "loose"},
         "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}}},
    ]  # fmt: skip
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump({"kind": "List", "items": nodes}))
    policies = tmp_path / "policies"
    policies.mkdir()
    keep = {"keepTogether": {"level": "network-tier-2"}}
    write_yaml(policies / "p.yaml", policy_doc("together", placement=keep))
    container = {"name": "t", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "labels": {"topoplace.io/policy": "together"}},
        "spec": {
            "parallelism": parallelism,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }
    write_yaml(tmp_path / "job.yaml", job)
    return tmp_path / "nodes.yaml", policies, tmp_path / "job.yaml"


async def test_each_domain_says_how_many_pods_fit_and_why_not_more(tmp_path: Path) -> None:
    nodes, policies, job = _files(tmp_path, 4)
    argv = ("explain", "--policies", str(policies), "--nodes", str(nodes), str(job))
    code, out, err = await run(webhook_main, *argv, "--output", "json")
    assert code == 0, err
    view = json.loads(out)["domains"]
    assert (view["level"], view["key"], view["pods"], view["fitting"]) == (
        "network-tier-2", T2, 4, 1
    )  # fmt: skip
    b1, b2 = view["domains"]
    assert (b1["domain"], b1["fits"], b1["reason"]) == ("b1", 4, None)
    assert (b2["domain"], b2["fits"]) == ("b2", 3)
    assert b2["reason"].startswith("node c1 holds 1, then: free nvidia.com/gpu 0")
    assert view["unlabelled"] == ["loose"]
    code, table, _ = await run(webhook_main, *argv)
    assert "keepTogether network-tier-2: 1 of 2 domains hold all 4 pods" in table
    assert "network-tier-2 b2: 3 of 4 pods fit (node c1 holds 1, then:" in table


async def test_a_job_bigger_than_every_domain_fits_none(tmp_path: Path) -> None:
    nodes, policies, job = _files(tmp_path, 5)
    argv = ("explain", "--policies", str(policies), "--nodes", str(nodes), str(job))
    code, out, _ = await run(webhook_main, *argv, "--output", "json")
    view = json.loads(out)["domains"]
    assert view["fitting"] == 0 and [d["fits"] for d in view["domains"]] == [4, 3]
    assert code == 0  # nodes still fit one pod each: the per-node contract is unchanged


async def test_a_pod_gets_no_domain_view(tmp_path: Path) -> None:
    nodes, policies, _ = _files(tmp_path, 2)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"topoplace.io/policy": "together"}},
        "spec": {"containers": [{"name": "t", "image": "i"}]},
    }
    write_yaml(tmp_path / "pod.yaml", pod)
    argv = (
        "explain",
        "--policies",
        str(policies),
        "--nodes",
        str(nodes),
        str(tmp_path / "pod.yaml"),
    )
    _, out, err = await run(webhook_main, *argv, "--output", "json")
    assert "domains" not in json.loads(out)
    assert "cannot keep a lone pod" in err


async def test_a_job_with_spec_scheduling_is_explained_on_its_groups_key(tmp_path: Path) -> None:
    """The Job as the webhook stores it on a v1.37 cluster with the gates on (`mutate
    --output pod`): the domains are the constraint's, the count the gang's minCount."""
    nodes, policies, job_file = _files(tmp_path, 5)
    job = yaml.safe_load(job_file.read_text())
    job["spec"]["scheduling"] = {
        "schedulingPolicy": {"gang": {"minCount": 3}},
        "schedulingConstraints": {"topology": [{"key": T1}]},  # the user's own key
    }
    write_yaml(job_file, job)
    argv = ("explain", "--policies", str(policies), "--nodes", str(nodes), str(job_file))
    code, out, err = await run(webhook_main, *argv, "--output", "json")
    assert code == 0, err
    view = json.loads(out)["domains"]
    assert (view["key"], view["level"], view["pods"]) == (T1, T1, 3)
    assert view["source"] == "Job/train spec.scheduling"
    assert {d["domain"]: d["fits"] for d in view["domains"]} == {"b1.s": 3, "b2.s": 3}
    _, table, _ = await run(webhook_main, *argv)
    assert f"keepTogether {T1} (Job/train spec.scheduling): 2 of 2 domains hold all 3" in table


async def test_pods_naming_a_podgroup_are_explained_on_the_groups_constraint(
    tmp_path: Path,
) -> None:
    """FILE holds the PodGroup (upstream's scheduler_perf TAS template, labelled) and the
    pod template naming it: per domain of its key, how many of its minCount pods fit."""
    nodes, policies, job_file = _files(tmp_path, 6)
    job = yaml.safe_load(job_file.read_text())
    job["spec"]["template"]["spec"]["schedulingGroup"] = {"podGroupName": "gang-0"}
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "gang-0", "labels": {"topoplace.io/policy": "together"}},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 6}},
            "schedulingConstraints": {"topology": [{"key": T2}]},
        },
    }
    both = tmp_path / "both.yaml"
    both.write_text(yaml.safe_dump_all([group, job]))
    argv = ("explain", "--policies", str(policies), "--nodes", str(nodes), str(both))
    code, out, err = await run(webhook_main, *argv, "--output", "json")
    assert code == 0, err
    view = json.loads(out)["domains"]
    assert (view["level"], view["pods"], view["fitting"], view["source"]) == (
        "network-tier-2", 6, 0, "PodGroup/gang-0"
    )  # fmt: skip
    b1, b2 = view["domains"]
    assert (b1["domain"], b1["fits"]) == ("b1", 4) and b1["reason"].startswith(
        "node a1 holds 2, then: free nvidia.com/gpu 0"
    )
    assert (b2["domain"], b2["fits"]) == ("b2", 3)
