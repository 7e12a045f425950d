"""The record of a running cluster (cluster.json) and where it lives: what `up` wrote, for
the node commands, the e2e tests and `down`."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from e2e import procs
from e2e.controlplane.pki import Pki
from e2e.controlplane.start import ControlPlane
from e2e.kube import Kubectl

__all__ = ["REPO", "Cluster", "load", "state_dir", "tmpfs_dir"]

REPO = Path(__file__).resolve().parent.parent


def state_dir() -> Path:
    return Path(os.environ.get("TOPOPLACE_E2E_STATE") or REPO / ".e2e").resolve()


def tmpfs_dir(state: Path) -> Path:
    key = hashlib.sha256(str(state).encode()).hexdigest()[:8]
    return Path("/dev/shm") / f"topoplace-e2e-{key}"


def _cwd(proc: dict[str, Any]) -> Path:
    return Path(proc.get("cwd") or REPO)


class Cluster:
    """What `up` recorded in cluster.json, for the e2e tests and `down`."""

    def __init__(self, state: Path, info: dict[str, Any]) -> None:
        self.state = state
        self.info = info
        self.kubeconfig = Path(info["kubeconfig"])
        self.bin = Path(info["bin"])
        self.kubectl = Kubectl(self.bin / "kubectl", self.kubeconfig)

    @property
    def nodes(self) -> dict[str, dict[str, Any]]:
        return self.info["nodes"]

    def restart(self, name: str) -> None:
        """Stop one of our processes and start it again with the same command line."""
        proc = self.info["procs"][name]
        procs.stop(self.state, name)
        procs.start(self.state, name, proc["argv"], env=proc["env"], cwd=_cwd(proc))

    def stop(self, name: str) -> None:
        procs.stop(self.state, name)

    def start(self, name: str) -> None:
        proc = self.info["procs"][name]
        procs.start(self.state, name, proc["argv"], env=proc["env"], cwd=_cwd(proc))

    def control_plane(self) -> ControlPlane:
        return ControlPlane(
            self.state,
            self.bin,
            Pki(Path(self.info["ca"]).parent),
            self.info["server"],
            self.kubeconfig,
            Path(self.info["etcd_data"]),
            self.info.get("pod_env", {}),
        )

    def save(self) -> None:
        (self.state / "cluster.json").write_text(json.dumps(self.info, indent=2) + "\n")


def load(state: Path | None = None) -> Cluster:
    state = state or state_dir()
    info_file = state / "cluster.json"
    if not info_file.exists():
        raise FileNotFoundError(f"no cluster at {state}: run `make cluster` first")
    return Cluster(state, json.loads(info_file.read_text()))
