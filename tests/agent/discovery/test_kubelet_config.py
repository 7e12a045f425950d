"""The kubelet's real policies: its config file in YAML or JSON, the `--config-dir` drop-ins
merged over it as the kubelet merges them, and the topology manager's policy options — each
seen through the labels the node gets."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.discovery.discover import DiscoveryOptions, discover
from agent.sources import kubelet
from common.vocabulary import Label

Machine = Callable[[str], Path]
Options = Callable[..., DiscoveryOptions]
HEAD = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
POLICY_KEYS = (
    Label.CPU_MANAGER_POLICY,
    Label.TOPOLOGY_MANAGER_POLICY,
    Label.TOPOLOGY_MANAGER_SCOPE,
    Label.MEMORY_MANAGER_POLICY,
    Label.TOPOLOGY_MANAGER_PREFER_CLOSEST,
    Label.TOPOLOGY_MANAGER_MAX_NUMA_NODES,
)


def policy_labels(options: DiscoveryOptions) -> dict[str, str]:
    labels = discover(options).labels
    return {k: labels[k] for k in POLICY_KEYS if k in labels}


def test_drop_ins_merge_over_the_file_in_lexical_order(
    tmp_path: Path, built_machine: Machine, options: Options
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        HEAD + "cpuManagerPolicy: none\ntopologyManagerPolicy: best-effort\n"
        "topologyManagerPolicyOptions:\n  prefer-closest-numa-nodes: 'true'\n"
    )
    drop = tmp_path / "config.d"
    (drop / "20-gpu").mkdir(parents=True)
    (drop / "10-cpu.conf").write_text(
        HEAD + "cpuManagerPolicy: static\nmemoryManagerPolicy: Static\n"
    )
    # Subdirectories are walked too, in place: 20-gpu/ comes after 10-cpu.conf, before 30-…
    (drop / "20-gpu" / "topology.conf").write_text(
        json.dumps({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                    "topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod",
                    "topologyManagerPolicyOptions": {"max-allowable-numa-nodes": "16"}})
    )  # fmt: skip
    # A merge patch: null removes the option (back to its default), other keys stay.
    (drop / "30-late.conf").write_text(
        HEAD + "topologyManagerPolicyOptions:\n  prefer-closest-numa-nodes: null\n"
    )
    (drop / "40-ignored.yaml").write_text(HEAD + "cpuManagerPolicy: none\n")  # not *.conf
    (drop / "05-empty.conf").write_text("")
    got = policy_labels(
        options(built_machine("vm"), kubelet_config=config, kubelet_config_dir=drop)
    )
    assert got == {
        Label.CPU_MANAGER_POLICY: "static",
        Label.TOPOLOGY_MANAGER_POLICY: "single-numa-node",
        Label.TOPOLOGY_MANAGER_SCOPE: "pod",
        Label.MEMORY_MANAGER_POLICY: "Static",
        Label.TOPOLOGY_MANAGER_PREFER_CLOSEST: "false",
        Label.TOPOLOGY_MANAGER_MAX_NUMA_NODES: "16",
    }


def test_json_config_as_eks_writes_it(
    tmp_path: Path, built_machine: Machine, options: Options
) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        '{\n\t"kind": "KubeletConfiguration",\n\t"apiVersion": "kubelet.config.k8s.io/v1beta1",'
        '\n\t"cpuManagerPolicy": "static",\n\t"topologyManagerPolicy": "restricted",'
        '\n\t"topologyManagerPolicyOptions": {"prefer-closest-numa-nodes": "True"}\n}\n'
    )  # tab-indented: valid JSON that YAML 1.1 would refuse
    got = policy_labels(options(built_machine("vm"), kubelet_config=config))
    assert got[Label.CPU_MANAGER_POLICY] == "static"
    assert got[Label.TOPOLOGY_MANAGER_POLICY] == "restricted"
    assert got[Label.TOPOLOGY_MANAGER_PREFER_CLOSEST] == "true"  # Go's ParseBool, normalised
    assert got[Label.TOPOLOGY_MANAGER_MAX_NUMA_NODES] == "8"  # the kubelet's default


def test_drop_in_directory_alone_merges_over_the_defaults(
    tmp_path: Path, built_machine: Machine, options: Options
) -> None:
    drop = tmp_path / "config.d"
    drop.mkdir()
    (drop / "00.conf").write_text(HEAD + "topologyManagerPolicy: restricted\n")
    got = policy_labels(options(built_machine("vm"), kubelet_config_dir=drop))
    assert got == {
        Label.CPU_MANAGER_POLICY: "none",
        Label.TOPOLOGY_MANAGER_POLICY: "restricted",
        Label.TOPOLOGY_MANAGER_SCOPE: "container",
        Label.MEMORY_MANAGER_POLICY: "None",
        Label.TOPOLOGY_MANAGER_PREFER_CLOSEST: "false",
        Label.TOPOLOGY_MANAGER_MAX_NUMA_NODES: "8",
    }


@pytest.mark.parametrize(
    ("options_yaml", "missing"),
    [
        ("prefer-closest-numa-nodes: 'maybe'", Label.TOPOLOGY_MANAGER_PREFER_CLOSEST),
        ("max-allowable-numa-nodes: '4'", Label.TOPOLOGY_MANAGER_MAX_NUMA_NODES),  # below 8
        ("max-allowable-numa-nodes: lots", Label.TOPOLOGY_MANAGER_MAX_NUMA_NODES),
    ],
)
def test_an_option_the_kubelet_refuses_is_not_labelled(
    options_yaml: str,
    missing: str,
    tmp_path: Path,
    built_machine: Machine,
    options: Options,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(HEAD + f"topologyManagerPolicyOptions:\n  {options_yaml}\n")
    with caplog.at_level(logging.WARNING):
        got = policy_labels(options(built_machine("vm"), kubelet_config=config))
    assert missing not in got
    assert got[Label.TOPOLOGY_MANAGER_POLICY] == "none"
    assert "the kubelet refuses it" in caplog.text


def test_a_broken_drop_in_means_no_policy_labels(
    tmp_path: Path, built_machine: Machine, options: Options, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(HEAD + "cpuManagerPolicy: static\n")
    drop = tmp_path / "config.d"
    drop.mkdir()
    (drop / "10-bad.conf").write_text("cpuManagerPolicy: [static\n")
    with caplog.at_level(logging.WARNING):
        got = policy_labels(
            options(built_machine("vm"), kubelet_config=config, kubelet_config_dir=drop)
        )
    assert got == {}  # the kubelet would not start with it either
    assert "10-bad.conf" in caplog.text


DEEP_JSON = '{"kind": "KubeletConfiguration", "x": ' + "[" * 5000 + "]" * 5000 + "}"
BOUNDED = {
    "deeply nested YAML": (HEAD + "x:\n" + "".join("  " * i + "- \n" for i in range(1500)),
                           "nested deeper than 100 levels"),
    "deeply nested JSON": (DEEP_JSON, "JSON nested too deeply"),
    "JSON past 100 levels": ('{"x": ' + "[" * 200 + "]" * 200 + "}",
                             "nested deeper than 100 levels"),
    "an alias bomb": (HEAD + "a: &a [x]\nb: &b [" + ",".join(["*a"] * 9) + "]\n"
                      + "".join(f"c{i}: [" + ",".join(["*b"] * 9) + "]\n" for i in range(500)),
                      "more than 1000 YAML aliases"),
    "two documents": (HEAD + "---\n" + HEAD, "2 YAML documents; the kubelet reads one"),
    "past 4 MiB": (HEAD + "# padding\n" * 500_000, "larger than 4 MiB"),
}  # fmt: skip


@pytest.mark.parametrize(("text", "says"), BOUNDED.values(), ids=BOUNDED.keys())
def test_a_config_past_its_bounds_is_one_warning_and_no_policy_labels(
    tmp_path: Path,
    built_machine: Machine,
    options: Options,
    caplog: pytest.LogCaptureFixture,
    text: str,
    says: str,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    with caplog.at_level(logging.WARNING):
        labels = discover(options(built_machine("vm"), kubelet_config=config)).labels
    assert not set(POLICY_KEYS) & set(labels)
    assert labels[Label.CPU_SOCKETS] == "1"  # the rest of discovery goes on
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f"kubelet config not read, its policies are not labelled: {config}")
    assert says in warning and "\n" not in warning


def test_merge_patch_is_rfc_7386() -> None:
    target = {"a": {"b": 1, "c": 2}, "l": [1, 2], "k": "v"}
    patch = {"a": {"b": None, "d": 3}, "l": [3], "k": None, "n": {"x": None}}
    assert kubelet.merge_patch(target, patch) == {"a": {"c": 2, "d": 3}, "l": [3], "n": {}}
