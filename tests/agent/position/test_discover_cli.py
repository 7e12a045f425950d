"""`topoplace-agent discover --network-metadata`: the position in what discover prints, and its
flags' bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from common.vocabulary import Label
from tests.agent.position.metadata_server import metadata_server
from tests.agent.sync.harness import make_tiny_sysfs


def _discover(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    root = tmp_path / "sys"
    if not root.exists():
        make_tiny_sysfs(root)
    return subprocess.run(
        [sys.executable, "-m", "agent", "discover", "--no-nvml", "--sysfs-root", str(root),
         "--dataset-root", str(tmp_path / "none"), *flags],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_discover_prints_the_metadata_position(tmp_path: Path) -> None:
    with metadata_server() as server:
        body = {"customerLocalBlock": "lb", "customerNetworkBlock": "nb"}
        url = server.answer("/oci", json.dumps(body))
        done = _discover(tmp_path, "--network-metadata", "oci", "--network-metadata-endpoint", url)
    assert done.returncode == 0, done.stderr
    labels = json.loads(done.stdout)["labels"]
    assert labels[Label.NETWORK_TIER_1] == "nb.lb"
    assert labels[Label.NETWORK_TIER_2] == "nb"


def test_bad_metadata_flags_are_named(tmp_path: Path) -> None:
    done = _discover(tmp_path, "--network-metadata", "aws")
    assert done.returncode == 2 and "--network-metadata" in done.stderr
    done = _discover(tmp_path, "--network-metadata", "gcp", "--network-metadata-timeout", "60")
    assert done.returncode == 2 and "at most 10" in done.stderr
    done = _discover(tmp_path, "--network-metadata-endpoint", "http://127.0.0.1:1/")
    assert done.returncode != 0 and "needs --network-metadata" in done.stderr


def test_discover_on_azure_prints_the_placement_group_as_tier_3_alone(tmp_path: Path) -> None:
    with metadata_server() as server:
        body = {"placementGroupId": "f67c14ab-e92c-408c-ae2d-da15866ec79a", "vmSize": "x"}
        url = server.answer("/compute", json.dumps(body))
        flags = ["--network-metadata", "azure", "--network-metadata-endpoint", url]
        done = _discover(tmp_path, *flags)
    assert done.returncode == 0, done.stderr
    labels = json.loads(done.stdout)["labels"]
    assert labels[Label.NETWORK_TIER_3] == "f67c14ab-e92c-408c-ae2d-da15866ec79a"
    assert Label.NETWORK_TIER_1 not in labels and Label.NETWORK_TIER_2 not in labels
