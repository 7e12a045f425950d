"""`make cluster` / `make cluster-down`: a real control plane and one real kubelet per
simulated machine, with Topoplace on it.

    python -m e2e.cluster up      # start everything, print the two export lines, exit
    python -m e2e.cluster down    # stop every process it started, by pid; remove the state
    python -m e2e.cluster status  # what runs
    python -m e2e.cluster nodes --output json             # the nodes and their kubelets' paths
    python -m e2e.cluster add-node NAME --sysfs DIR [--kubelet-config FILE] [--memory QTY]
    python -m e2e.cluster remove-node NAME
    python -m e2e.cluster audit NAME [--output json]      # the agent's audit on that node
    python -m e2e.cluster prometheus-url                  # the Prometheus scraping our pods

State (kubeconfigs, PKI, logs, pids, node fixtures) lives in $TOPOPLACE_E2E_STATE, default
<repo>/.e2e; etcd's data and each kubelet's /var in /dev/shm (short paths: unix sockets live
there). `cluster.json` there tells the e2e tests where
everything is. A second cluster on the same host needs its own $TOPOPLACE_E2E_STATE and its
own pod-IP block, $TOPOPLACE_E2E_POD_OCTET (default 2: pods on 127.2.x.y), for every command
that starts nodes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e import procs
from e2e.addons import kueue, objectstore, prometheus
from e2e.controlplane.numa_scheduler import start_numa_scheduler
from e2e.controlplane.start import ControlPlane, start_control_plane, workload_scheduling_args
from e2e.kube import Kubectl
from e2e.nodes import manage
from e2e.nodes.fleet import host_paths, rss_mib, start_nodes
from e2e.nodes.start import node_procs, runtime_binary
from e2e.state import Cluster, load, state_dir, tmpfs_dir
from e2e.topoplace.install import REPO, VENV_BIN, install, wait_running
from e2e.versions import cache_dir

__all__ = ["Cluster", "load", "main", "state_dir"]

# Stopped first to last: our processes before the control plane they talk to.
STOP_ORDER_PREFIXES = (
    "kubelet-",
    "runtime-",
    "mountns-",
    "kueue",
    "prometheus",
    "kube-scheduler",
    "kube-controller-manager",
    "kube-apiserver",
    "object-store",
    "service-proxy",
    "etcd",
)


def bin_dir() -> Path:
    return cache_dir("e2e_bin_dir")


REQUIRED_BINS = ("etcd", "kube-apiserver", "kubectl", "kubelet")


def _exports(info: dict[str, Any]) -> str:
    return f"export KUBECONFIG={info['kubeconfig']}\nexport PATH={info['path']}:$PATH"


def _path_dir(state: Path, bins: Path) -> Path:
    """One directory for PATH: the Kubernetes binaries and our commands (kubectl plugins too)."""
    out = state / "bin"
    out.mkdir(parents=True, exist_ok=True)
    links = {p.name: p for p in bins.iterdir()}
    links |= {p.name: p for p in VENV_BIN.glob("topoplace-*")}
    links |= {p.name: p for p in VENV_BIN.glob("kubectl-*")}
    for name, target in links.items():
        (out / name).unlink(missing_ok=True)
        (out / name).symlink_to(target)
    return out


def _say(started: float) -> Callable[[str], None]:
    def say(text: str) -> None:
        print(f"[cluster {time.monotonic() - started:5.1f}s] {text}", flush=True)

    return say


def up(state: Path) -> int:
    started = time.monotonic()
    say = _say(started)
    alive = procs.running(state)
    if alive and (state / "cluster.json").exists():
        print(f"cluster already up ({len(alive)} processes, state {state})")
        print(_exports(json.loads((state / "cluster.json").read_text())))
        return 0
    if state.exists():  # gone, or a start that never finished: clean what it left
        say(f"a previous cluster at {state} is gone or unfinished; cleaning its state")
        down(state, quiet=True)
    bins = bin_dir()
    missing = [b for b in REQUIRED_BINS if not (bins / b).exists()]
    if not runtime_binary(bins).exists():
        missing.append(runtime_binary(bins).name)
    with_kueue = kueue.wanted()
    if with_kueue and not (kueue.kueue_dir() / "bin" / "kueue").exists():
        missing.append(f"kueue (in {kueue.kueue_dir()}; or {kueue.OPT_OUT}=0 for none)")
    with_prometheus = prometheus.wanted()
    if with_prometheus and not (prometheus.prometheus_dir() / "prometheus").exists():
        missing.append(f"prometheus (in {prometheus.prometheus_dir()}; or {prometheus.OPT_OUT}=0)")
    if missing:
        print(f"missing {', '.join(missing)} in {bins}: run `make e2e-bin`", file=sys.stderr)
        return 1
    state.mkdir(parents=True, exist_ok=True)
    (state / _HOST_BEFORE).write_text(json.dumps(host_paths()) + "\n")
    etcd_data = tmpfs_dir(state) / "etcd"
    etcd_data.mkdir(parents=True, exist_ok=True)
    try:
        cp = start_control_plane(state, bins, etcd_data, say)
        store = objectstore.start(state, REPO / "policies")
        cp = dataclasses.replace(cp, pod_env=cp.pod_env | objectstore.pod_env(store))
        say(f"object store on {store}, holding the policies' s3:// datasets")
        k = Kubectl(bins / "kubectl", cp.admin_kubeconfig)
        node_paths, ours = start_nodes(cp, k, tmpfs_dir(state) / "nodes", say)
        install(k, say)
        running = wait_running(k, list(node_paths), say)
        start_numa_scheduler(cp, k, say)
        for node, url in running["agent_metrics"].items():
            node_paths[node]["agent_metrics"] = url
        queue = kueue.start(state, k, cp.admin_kubeconfig, say) if with_kueue else None
        scraper = prometheus.start(state, cp.admin_kubeconfig, say) if with_prometheus else None
    except Exception as exc:
        try:
            print(f"make cluster failed: {exc}", file=sys.stderr)
            for name in procs.running(state):
                print(procs.log_tail(state, name, 15), file=sys.stderr)
        finally:  # a closed stderr must not leave processes behind
            down(state, quiet=True)
        return 1
    info = _record(state, cp, bins, node_paths, ours, queue)
    info["prometheus"] = scraper
    (state / "cluster.json").write_text(json.dumps(info, indent=2) + "\n")
    alive = procs.running(state)
    rss = ", ".join(
        f"{name} {rss_mib(alive[node_procs(name)[0]]):.0f} MiB"
        for name in node_paths
        if node_procs(name)[0] in alive
    )
    say(f"kubelet RSS: {rss}")
    say(f"cluster up: {len(node_paths)} nodes; logs in {state / 'logs'}")
    print(_exports(info))
    return 0


def _record(
    state: Path,
    cp: ControlPlane,
    bins: Path,
    node_paths: dict[str, Any],
    ours: dict[str, Any],
    queue: dict[str, Any] | None,
) -> dict[str, Any]:
    info = {
        "state": str(state),
        "bin": str(bins),
        "path": str(_path_dir(state, bins)),
        "server": cp.server,
        "kubeconfig": str(cp.admin_kubeconfig),
        "ca": str(cp.pki.ca),
        "audit_log": str(cp.audit_log),
        "etcd_data": str(cp.etcd_data),
        "pod_env": cp.pod_env,
        "nodes": node_paths,
        "procs": ours,
        "kueue": queue,
        # Kubernetes' gang and topology-aware scheduling on (controlplane/start.py).
        "workload_scheduling": bool(workload_scheduling_args("kube-scheduler")),
    }
    (state / "cluster.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


_HOST_BEFORE = "host-paths-before.json"


def down(state: Path, *, quiet: bool = False) -> int:
    before_file = state / _HOST_BEFORE
    before = json.loads(before_file.read_text()) if before_file.exists() else None
    names = [p.stem for p in sorted((state / "pids").glob("*.pid"))] if state.exists() else []
    order = sorted(
        names,
        key=lambda n: next(
            (i for i, p in enumerate(STOP_ORDER_PREFIXES) if n.startswith(p)),
            len(STOP_ORDER_PREFIXES),
        ),
    )
    stopped = procs.stop_all(state, order) if names else []
    shutil.rmtree(tmpfs_dir(state), ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)
    left = sorted(set(host_paths()) - set(before)) if before is not None else []
    if left:
        print(f"cluster down: left on the host: {', '.join(left)}", file=sys.stderr)
    if not quiet:
        print(f"cluster down: stopped {len(stopped)} processes, removed {state}")
    return 1 if left else 0


def status(state: Path) -> int:
    alive = procs.running(state)
    if not alive:
        print(f"no cluster running (state {state})")
        return 1
    for name, pid in alive.items():
        print(f"{pid:>8}  {name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.cluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "down", "status"):
        sub.add_parser(name)
    sub.add_parser("prometheus-url", help="print the URL of the cluster's Prometheus")
    manage.add_parsers(sub)
    args = parser.parse_args(argv)
    state = state_dir()
    if args.command in ("up", "down", "status"):
        return {"up": up, "down": down, "status": status}[args.command](state)
    try:
        cluster = load(state)
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.command == "prometheus-url":
        scraper = cluster.info.get("prometheus")
        if not scraper:
            print(f"this cluster runs no Prometheus ({prometheus.OPT_OUT}=0)", file=sys.stderr)
            return 1
        print(scraper["url"])
        return 0
    return manage.run(args, cluster, host_root=tmpfs_dir(state) / "nodes")


if __name__ == "__main__":
    raise SystemExit(main())
