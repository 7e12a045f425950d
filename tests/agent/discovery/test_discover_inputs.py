"""The non-PCI inputs: kubelet config, dataset cache, NVML (absent on this machine), and label
validity at the edge — each seen through the labels a user gets."""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.discovery.discover import DiscoveryOptions, discover
from agent.discovery.labels import derive_labels
from agent.discovery.topology import build_topology
from agent.sources import cpu, kubelet, nic, nvml, pci
from agent.sources.datasets import discover as discover_datasets
from common import cache_layout
from common.vocabulary import Label, dataset_label

Machine = Callable[[str], Path]
Options = Callable[..., DiscoveryOptions]


# --- kubelet ------------------------------------------------------------------------------------


def test_kubelet_policies_become_labels(
    tmp_path: Path, built_machine: Machine, options: Options
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "cpuManagerPolicy: static\ntopologyManagerPolicy: single-numa-node\n"
        "topologyManagerScope: pod\nmemoryManagerPolicy: Static\n"
    )
    labels = discover(options(built_machine("vm"), kubelet_config=config)).labels
    assert labels[Label.CPU_MANAGER_POLICY] == "static"
    assert labels[Label.TOPOLOGY_MANAGER_POLICY] == "single-numa-node"
    assert labels[Label.TOPOLOGY_MANAGER_SCOPE] == "pod"
    assert labels[Label.MEMORY_MANAGER_POLICY] == "Static"


def test_kubelet_fields_left_out_are_the_kubelet_defaults(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("kind: KubeletConfiguration\ncpuManagerPolicy: static\n")
    got = kubelet.discover(config)
    assert got == kubelet.KubeletFiles("static", "none", "container", "None", "false", "8")


@pytest.mark.parametrize(
    "content", ["cpuManagerPolicy: [static\n", "- a list\n", b"\xff\xfe\x00"], ids=str
)
def test_unreadable_kubelet_config_gives_no_policy_labels(
    content: str | bytes,
    tmp_path: Path,
    built_machine: Machine,
    options: Options,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = tmp_path / "config.yaml"
    if isinstance(content, bytes):
        config.write_bytes(content)
    else:
        config.write_text(content)
    with caplog.at_level(logging.WARNING):
        labels = discover(options(built_machine("vm"), kubelet_config=config)).labels
    assert Label.CPU_MANAGER_POLICY not in labels
    assert labels[Label.CPU_SOCKETS] == "1"
    assert any(str(config) in r.getMessage() for r in caplog.records)


def test_invalid_kubelet_value_is_dropped_not_published(
    tmp_path: Path, built_machine: Machine, options: Options, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("cpuManagerPolicy: 'static policy!'\ntopologyManagerPolicy: restricted\n")
    with caplog.at_level(logging.WARNING):
        labels = discover(options(built_machine("vm"), kubelet_config=config)).labels
    assert Label.CPU_MANAGER_POLICY not in labels
    assert labels[Label.TOPOLOGY_MANAGER_POLICY] == "restricted"
    assert any(Label.CPU_MANAGER_POLICY in r.getMessage() for r in caplog.records)


# --- datasets -----------------------------------------------------------------------------------


def _complete(root: Path, name: str, version: str, completed_at: str | None) -> None:
    marker = cache_layout.marker_path(root, name, version)
    marker.parent.mkdir(parents=True)
    doc = {"source": "s3://b/x/", "files": 1, "bytes": 1}
    if completed_at is not None:
        doc["completed_at"] = completed_at
    marker.write_text(json.dumps(doc))


def test_newest_complete_dataset_version_is_labelled(
    tmp_path: Path, built_machine: Machine, options: Options
) -> None:
    cache = tmp_path / "cache"
    # Completion order, not name order: "2024-06" finished after "2024-09".
    _complete(cache, "imagenet", "2024-09", "2026-11-01T10:00:00Z")
    _complete(cache, "imagenet", "2024-06", "2026-11-02T10:00:00+00:00")
    # Same instant: the version string decides.
    _complete(cache, "c4", "v1", "2026-11-01T10:00:00Z")
    _complete(cache, "c4", "v2", "2026-11-01T11:00:00+01:00")
    # Incomplete (no marker) and temporary downloads are not versions.
    (cache / "imagenet" / "2025-01").mkdir()
    (cache / "imagenet" / f"{cache_layout.TEMP_PREFIX}2025-02").mkdir()
    (cache / "empty").mkdir()
    labels = discover(options(built_machine("vm"), dataset_root=cache)).labels
    assert labels[dataset_label("imagenet")] == "2024-06"
    assert labels[dataset_label("c4")] == "v2"
    assert dataset_label("empty") not in labels


def test_marker_without_usable_time_counts_complete_but_oldest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    _complete(cache, "wiki", "b", None)
    _complete(cache, "wiki", "a", "2026-01-01T00:00:00Z")
    cache_layout.marker_path(cache, "wiki", "c").parent.mkdir()
    cache_layout.marker_path(cache, "wiki", "c").write_text("{not json")
    with caplog.at_level(logging.WARNING):
        newest = discover_datasets(cache).newest
    assert newest == {"wiki": "a"}
    assert sum("completed_at" in r.getMessage() for r in caplog.records) == 2


def test_dataset_name_invalid_as_label_is_dropped(
    tmp_path: Path, built_machine: Machine, options: Options, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    long_name = "d" * 64
    _complete(cache, long_name, "v1", "2026-01-01T00:00:00Z")
    _complete(cache, "ok", "v 1", "2026-01-01T00:00:00Z")  # a space: invalid value
    _complete(cache, "fine", "v1", "2026-01-01T00:00:00Z")
    with caplog.at_level(logging.WARNING):
        labels = discover(options(built_machine("vm"), dataset_root=cache)).labels
    assert dataset_label(long_name) not in labels and dataset_label("ok") not in labels
    assert labels[dataset_label("fine")] == "v1"
    assert len([r for r in caplog.records if "dropped" in r.getMessage()]) == 2


def test_only_the_dataset_root_changes_dataset_labels(
    tmp_path: Path, built_machine: Machine, options: Options
) -> None:
    cache = tmp_path / "cache"
    root = built_machine("dgx-a100")
    before = discover(options(root, dataset_root=cache)).labels
    _complete(cache, "imagenet", "2024-06", "2026-11-02T10:00:00Z")
    after = discover(options(root, dataset_root=cache)).labels
    assert dict(after) == {**before, dataset_label("imagenet"): "2024-06"}


# --- NVML ---------------------------------------------------------------------------------------


def test_nvml_source_degrades_without_a_driver(caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    session = nvml.NvmlSession(clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="agent.sources.nvml"):
        first = nvml.discover(session=session)
        again = nvml.discover(session=session)
        now[0] += nvml.NvmlSession.RETRY_SECONDS + 1  # retried: still no driver here
        later = nvml.discover(session=session)
    assert first.gpus == {} and first.reason
    assert again == first == later
    assert len([r for r in caplog.records if "NVML unavailable" in r.getMessage()]) == 1
    assert nvml.discover(enabled=False).reason == "disabled (--no-nvml)"


def test_discover_with_nvml_on_a_driverless_machine_logs_once_and_succeeds(
    python: str, repo_root: Path, built_machine: Machine
) -> None:
    root = built_machine("workstation")
    proc = subprocess.run(
        [python, "-m", "agent", "discover", "--sysfs-root", str(root),
         "--dataset-root", str(root.parent / "none"), "--output", "json"],
        capture_output=True, text=True, cwd=repo_root, env={"PYTHONPATH": str(repo_root)},
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("NVML unavailable") == 1
    labels = json.loads(proc.stdout)["labels"]
    assert labels[Label.GPUS] == "2"
    assert Label.GPU_PRODUCT not in labels


def test_nvml_product_names_become_a_sanitised_label(built_machine: Machine) -> None:
    # NVML's answer is plain data (bus ids in NVML's own 8-digit-domain upper-case form);
    # the derivation from it is pure, so it is checked here without a driver.
    root = built_machine("workstation")

    def topo(names: list[str]) -> dict[str, str]:
        gpus = {
            nvml.normalize_bus_id(bus): nvml.NvmlGpu(
                bdf=nvml.normalize_bus_id(bus), name=name, uuid="GPU-x", memory_bytes=1, nvlinks=0
            )
            for bus, name in zip(["00000000:01:00.0", "00000000:02:00.0"], names, strict=True)
        }
        return derive_labels(
            build_topology(
                cpu=cpu.discover(root),
                pci=pci.discover(root),
                nics=nic.discover(root),
                nvml=nvml.NvmlInfo(gpus=gpus, driver_version="560.35.03", reason=None),
                kubelet=kubelet.KubeletFiles(),
                datasets={},
            )
        )

    same = topo(["NVIDIA RTX 6000 Ada Generation"] * 2)
    assert same[Label.GPU_PRODUCT] == "NVIDIA-RTX-6000-Ada-Generation"
    assert Label.GPU_PRODUCT not in topo(["NVIDIA RTX 6000 Ada Generation", "NVIDIA L40S"])
