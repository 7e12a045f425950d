"""`explain --nodes FILE` with NodeResourceTopology objects beside the Nodes: a node whose
hardware fits but whose NUMA nodes have no room now fails check `numa-free`, saying why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.webhook.builders import policy_doc, write_yaml
from tests.webhook.nodefit.conftest import EXAMPLE_NODES
from tests.webhook.placement_model.nrt import nrt

REPO = Path(__file__).resolve().parents[3]


def explain(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "webhook", "explain", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )


def test_free_capacity_is_judged_beside_the_hardware(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    placement = {"singleNumaNode": True}
    write_yaml(
        policies / "p.yaml",
        policy_doc("numa", placement=placement, resources={"guaranteed": False}),
    )
    nodes = yaml.safe_load(EXAMPLE_NODES.read_text())
    nodes["items"] += [
        nrt("dgx-h100-a", [2, 2], policy="restricted"),
        nrt("dgx-h100-b", [4, 0], policy="restricted"),
    ]
    nodes_file = tmp_path / "nodes.yaml"
    nodes_file.write_text(yaml.safe_dump(nodes))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "four", "labels": {"topoplace.io/policy": "numa"}},
        "spec": {
            "containers": [
                {"name": "t", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 4}}}
            ]
        },
    }
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(json.dumps(pod))
    done = explain("--policies", str(policies), "--nodes", str(nodes_file), "--output", "json",
                   "--namespace", "ml-team", str(pod_file))  # fmt: skip
    assert done.returncode == 0, done.stderr
    verdicts = {n["node"]: n for n in json.loads(done.stdout)["nodes"]}
    assert verdicts["dgx-h100-b"]["fits"]
    frag = verdicts["dgx-h100-a"]
    assert not frag["fits"] and frag["check"] == "numa-free"
    assert frag["reason"] == "now: no NUMA node has 4 free GPUs (free: 2, 2)"


def test_a_malformed_object_is_bad_input_naming_it(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    write_yaml(policies / "p.yaml", policy_doc("numa"))
    bad = nrt("dgx-h100-a", [2, 2])
    bad["zones"][0]["resources"][2]["available"] = "plenty"
    nodes_file = tmp_path / "nodes.yaml"
    nodes_file.write_text(yaml.safe_dump_all([bad]))
    pod_file = tmp_path / "pod.yaml"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}
    pod["spec"] = {"containers": [{"name": "t", "image": "i"}]}
    pod_file.write_text(json.dumps(pod))
    done = explain("--policies", str(policies), "--nodes", str(nodes_file), str(pod_file))
    assert done.returncode == 2
    assert "dgx-h100-a: zones[0].resources[2]" in done.stderr
