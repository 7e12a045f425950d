"""`python -m e2e.cluster nodes | add-node | remove-node`: the nodes of a running cluster.

`add-node` takes a sysfs tree as `topoplace-agent discover` reads it and returns once the
Node is Ready (its kubelet registered it) and labelled (the agent pod its kubelet runs
reconciled). A tree the
kubelet cannot be shown (no CPU topology) is refused before anything starts, and a node that
fails to come up is stopped and removed again: nothing is left behind either way.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from common.vocabulary import Label
from e2e import procs
from e2e.nodes.specs import SimulatedNode, memory_kib
from e2e.nodes.start import node_host, node_procs, start_node, stop_node, wait_ready
from e2e.nodes.view import NodeSetupError
from e2e.state import Cluster
from e2e.topoplace.install import VENV_BIN, wait_agents_ready

__all__ = ["add_parsers", "audit_argv", "run"]

CONTRACT_FIELDS = (
    "machine",
    "sysfs",
    "kubelet_root",
    "kubelet_config",
    "kubelet_config_dir",
    "pod_resources_socket",
)
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def add_parsers(sub: Any) -> None:
    nodes = sub.add_parser("nodes", help="list the simulated nodes")
    nodes.add_argument("--output", choices=("json", "table"), default="table")
    add = sub.add_parser("add-node", help="start one more simulated node")
    add.add_argument("name")
    add.add_argument("--sysfs", type=Path, required=True, help="the machine's sysfs tree")
    add.add_argument("--kubelet-config", type=Path, help="KubeletConfiguration fields (YAML)")
    add.add_argument(
        "--memory",
        default="64Gi",
        help="installed memory when the tree has no per-node meminfo (default 64Gi)",
    )
    remove = sub.add_parser("remove-node", help="stop a node's kubelet and delete the Node")
    remove.add_argument("name")
    audit = sub.add_parser("audit", help="topoplace-agent audit on a node (its kubelet's view)")
    audit.add_argument("name")
    audit.add_argument("--output", choices=("table", "json"), default="table")


def run(args: argparse.Namespace, cluster: Cluster, *, host_root: Path) -> int:
    if args.command == "nodes":
        return _list(cluster, args.output)
    if args.command == "add-node":
        return _add(cluster, args, host_root)
    if args.command == "audit":
        return _audit(cluster, args.name, args.output)
    return _remove(cluster, args.name)


def _list(cluster: Cluster, output: str) -> int:
    rows = [
        {"name": name, **{f: rec.get(f) for f in CONTRACT_FIELDS}}
        for name, rec in cluster.nodes.items()
    ]
    if output == "json":
        print(json.dumps({"nodes": rows}, indent=2))
    else:
        for row in rows:
            print(f"{row['name']:<20} {row['machine']:<14} {row['kubelet_root']}")
    return 0


# A kubelet holds about six (cAdvisor, its config and plugin watchers), its agent two.
_INOTIFY_PER_NODE = 10


def _fail(text: str) -> int:
    print(f"add-node: {text}", file=sys.stderr)
    return 2


def _kubelet_fields(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    doc = yaml.safe_load(path.read_text()) or {}
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping of KubeletConfiguration fields")
    return {k: v for k, v in doc.items() if k not in ("apiVersion", "kind")}


def _add(cluster: Cluster, args: argparse.Namespace, host_root: Path) -> int:
    name: str = args.name
    if not _NAME.match(name):
        return _fail(f"node name {name!r}: expected a DNS label (lower-case letters, digits, -)")
    if name in cluster.nodes:
        return _fail(f"node {name} exists already")
    sysfs = args.sysfs.resolve()
    if not sysfs.is_dir():
        return _fail(f"--sysfs {args.sysfs}: not a directory")
    try:
        memory_kib(args.memory)
        fields = _kubelet_fields(args.kubelet_config)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        return _fail(str(exc))
    used, limit = procs.inotify_instances()
    if limit is not None and limit - used < _INOTIFY_PER_NODE:
        return _fail(
            f"{used} of the {limit} inotify instances this user may hold are in use "
            f"(fs.inotify.max_user_instances); a kubelet and its agent need about "
            f"{_INOTIFY_PER_NODE}: stop another cluster, or raise the limit (sysctl -w "
            "fs.inotify.max_user_instances=512); nothing was started"
        )
    cp = cluster.control_plane()
    node = SimulatedNode(name, sysfs.name, args.memory, fields)
    index = 1 + max((rec.get("index", 0) for rec in cluster.nodes.values()), default=-1)
    t0 = time.monotonic()
    host = node_host(host_root, index)
    try:
        started = start_node(cp, node, index=index, host_root=host_root, sysfs=sysfs)
    except NodeSetupError as exc:
        stop_node(cluster.state, name, host)
        return _fail(f"--sysfs {args.sysfs}: {exc}; nothing was started")
    except Exception as exc:  # its runtime or kubelet did not start: nothing may stay
        stop_node(cluster.state, name, host)
        print(f"add-node {name} failed: {exc}", file=sys.stderr)
        return 1
    record = started.record
    try:
        wait_ready(cp, cluster.kubectl, name, record["devices"])
        # The DaemonSet controller gives the new node its agent pod; its kubelet runs it.
        record["agent_metrics"] = wait_agents_ready(cluster.kubectl, [name])[name]
        procs.wait_for(
            lambda: (
                Label.CPU_SOCKETS
                in cluster.kubectl.json("get", "node", name)["metadata"].get("labels", {})
            ),
            f"Node {name} labelled by its agent",
        )
    except Exception as exc:
        print(f"add-node {name} failed: {exc}", file=sys.stderr)
        _stop(cluster, name, host)
        return 1
    cluster.nodes[name] = record
    cluster.info["procs"] |= started.procs
    cluster.save()
    print(f"node {name} Ready and labelled in {time.monotonic() - t0:.1f}s")
    return 0


def _stop(cluster: Cluster, name: str, host: Path) -> None:
    stop_node(cluster.state, name, host)
    cluster.kubectl.run("delete", "node", name, "--ignore-not-found", check=False)


def _remove(cluster: Cluster, name: str) -> int:
    if name not in cluster.nodes:
        print(f"remove-node: no node {name} (see `nodes`)", file=sys.stderr)
        return 2
    _stop(cluster, name, Path(cluster.nodes[name]["host_root"]))
    del cluster.nodes[name]
    for proc in node_procs(name):
        cluster.info["procs"].pop(proc, None)
    cluster.save()
    print(f"node {name} stopped and deleted")
    return 0


def _audit(cluster: Cluster, name: str, output: str) -> int:
    """What the node's agent container would print: `topoplace-agent audit` with that node's
    sysfs, kubelet config, drop-ins and PodResources socket."""
    if name not in cluster.nodes:
        print(f"audit: no node {name} (see `nodes`)", file=sys.stderr)
        return 2
    return subprocess.run(audit_argv(cluster.nodes[name], output), check=False).returncode


def audit_argv(rec: dict[str, Any], output: str) -> list[str]:
    """`topoplace-agent audit` as the node's agent container would run it."""
    return [
        str(VENV_BIN / "topoplace-agent"),
        "audit",
        f"--output={output}",
        "--no-nvml",
        f"--sysfs-root={rec['sysfs']}",
        f"--kubelet-config={rec['kubelet_config']}",
        f"--kubelet-config-dir={rec['kubelet_config_dir']}",
        f"--pod-resources-socket={rec['pod_resources_socket']}",
    ]
