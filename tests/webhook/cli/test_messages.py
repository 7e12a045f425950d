"""Messages a person can act on, through the commands: the same note for many containers comes
once with a count, a denial once per reason (not once per template or per node), and `-n`
works where a command takes a namespace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.docs.markdown import REPO

POLICIES = REPO / "policies"


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_hundred_containers_without_resources_get_one_warning(tmp_path: Path) -> None:
    trainer = {"name": "trainer", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}
    sidecars = [{"name": f"side-{i}", "image": "i"} for i in range(99)]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "big", "labels": {"topoplace.io/policy": "inference"}},
        "spec": {"containers": [trainer, *sidecars]},
    }
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod))
    done = cli(
        "mutate", "--policies", str(POLICIES), "-n", "ml-team", str(path), "--output", "patch"
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "warning: Pod/big: 99 containers (side-0, side-1, side-2 and 96 more): sets no cpu or "
        "memory; using cpu 100m, memory 256Mi (requests = limits) for Guaranteed QoS"
    ]


def test_a_workload_denied_in_a_namespace_says_so_once() -> None:
    done = cli("mutate", "--policies", str(POLICIES), "examples/pods/pytorchjob.yaml")
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        "error: denied: PyTorchJob/resnet-ddp spec.pytorchReplicaSpecs.Master.template and 1 "
        "more: namespace 'default' may not use placement policy 'ddp-hgx-full-node' (ml-*)"
    )


def test_explain_in_a_forbidden_namespace_says_the_denial_once() -> None:
    done = cli(
        "explain", "--policies", str(POLICIES), "--nodes", "docs/examples/nodes.yaml",
        "-n", "default", "examples/pods/pytorchjob.yaml",
        "--template", "spec.pytorchReplicaSpecs.Worker.template",
    )  # fmt: skip
    assert done.returncode == 1
    assert (done.stdout + done.stderr).count("may not use placement policy") == 1
    assert done.stdout == "0 of 12 nodes: the webhook denies this pod (above)\n"


def test_mutate_takes_dash_n() -> None:
    done = cli("mutate", "--policies", str(POLICIES), "examples/pods/pytorchjob.yaml", "-n", "ml-a")
    assert done.returncode == 0, done.stderr
    assert "namespace: ml-a" in done.stdout or "ddp-hgx-full-node@" in done.stdout
