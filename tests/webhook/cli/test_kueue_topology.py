"""`kueue-topology` and `validate --nodes/--kubeconfig`: the levels the fleet carries, as a
strict Kueue tree, from a nodes file and from an API server speaking the real protocol."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.webhook.builders import policy_doc, write_yaml
from tests.webhook.cli.test_explain_kubeconfig import run
from tests.webhook.server.fake_nodes import NodeApiServer
from webhook.cli.main import main as webhook_main
from webhook.placement_model.levels import HOSTNAME, fleet_levels

T1, T2, T3 = (f"topoplace.io/network-tier-{n}" for n in (1, 2, 3))
DOMAIN = "topoplace.io/nvlink-domain"


def node(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {HOSTNAME: name, **labels}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


# 2 blocks x 2 sub-blocks, two nodes each; NVLink domains inside sub-blocks.
FLEET = [
    node(f"n{b}{s}{i}", **{T2: f"b{b}", T1: f"b{b}.s{s}", DOMAIN: f"u.{b}{s}"})
    for b in (1, 2)
    for s in (1, 2)
    for i in (1, 2)
]


def _labels(nodes: list[dict[str, Any]]) -> list[tuple[str, dict[str, str]]]:
    return [(n["metadata"]["name"], n["metadata"]["labels"]) for n in nodes]


def test_a_nested_fleet_gives_every_level_outermost_first() -> None:
    levels = fleet_levels(_labels(FLEET))
    assert levels.keys == (T2, T1, DOMAIN, HOSTNAME)
    assert levels.notes == []


def test_a_level_that_does_not_nest_is_left_out_with_a_note() -> None:
    fleet = copy.deepcopy(FLEET)
    fleet[0]["metadata"]["labels"][DOMAIN] = "u.22"  # one domain across two sub-blocks
    fleet.append(node("bare"))
    levels = fleet_levels(_labels(fleet))
    assert levels.keys == (T2, T1, HOSTNAME)
    assert any("nvlink-domain left out" in n and "u.22" in n for n in levels.notes)
    assert any("without topoplace.io/network-tier-2 (bare)" in n for n in levels.notes)


def _nodes_file(tmp_path: Path, nodes: list[dict[str, Any]]) -> Path:
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes}))
    return path


async def test_kueue_topology_from_a_nodes_file(tmp_path: Path) -> None:
    code, out, err = await run(
        webhook_main, "kueue-topology", "--nodes", str(_nodes_file(tmp_path, FLEET))
    )
    assert code == 0, err
    topology, flavor = yaml.safe_load_all(out)
    assert topology["kind"] == "Topology"
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == [T2, T1, DOMAIN, HOSTNAME]
    assert flavor["spec"]["topologyName"] == topology["metadata"]["name"]
    assert flavor["spec"]["nodeLabels"] == {"kubernetes.io/os": "linux"}  # Kueue wants one
    flags = ("--nodes", str(tmp_path / "nodes.yaml"), "--node-label", "pool=gpu")
    code, out, _ = await run(webhook_main, "kueue-topology", *flags)
    assert list(yaml.safe_load_all(out))[1]["spec"]["nodeLabels"] == {"pool": "gpu"}
    with pytest.raises(SystemExit) as refused:  # argparse: usage and the reason on stderr
        await run(webhook_main, "kueue-topology", *flags[:2], "--node-label", "pool")
    assert refused.value.code == 2


async def test_kueue_topology_without_levels_fails_saying_so(tmp_path: Path) -> None:
    code, out, err = await run(
        webhook_main, "kueue-topology", "--nodes", str(_nodes_file(tmp_path, [node("a")]))
    )
    assert code == 1 and out == "" and "none of the 1 nodes" in err
    code, _, err = await run(webhook_main, "kueue-topology", "--nodes", str(tmp_path / "nope"))
    assert code == 2 and "cannot read the nodes" in err


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[NodeApiServer]:
    async with NodeApiServer(tmp_path) as server:
        for n in FLEET:
            server.node_store.put(n)
        yield server


async def test_kueue_topology_and_validate_from_the_cluster(
    api: NodeApiServer, tmp_path: Path
) -> None:
    kubeconfig = str(api.write_kubeconfig())
    code, out, err = await run(webhook_main, "kueue-topology", "--kubeconfig", kubeconfig)
    assert code == 0, err
    topology, _flavor = yaml.safe_load_all(out)
    assert len(topology["spec"]["levels"]) == 4
    policies = tmp_path / "policies"
    policies.mkdir()
    for level in ("network-tier-2", "network-tier-3"):
        write_yaml(
            policies / f"{level}.yaml",
            policy_doc(level, placement={"keepTogether": {"level": level}}),
        )
    code, out, err = await run(webhook_main, "validate", str(policies), "--kubeconfig", kubeconfig)
    assert code == 0, err
    (warning,) = [line for line in err.splitlines() if line.startswith("warning:")]
    assert "policy network-tier-3" in warning and T3 in warning and "8 nodes" in warning
