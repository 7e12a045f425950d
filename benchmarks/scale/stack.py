"""The processes of the scale bench, all on 127.0.0.1 and all stopped at the end: the
control plane (kube-controller-manager without node-lifecycle and taint-eviction), the
webhook (`serve --node-cache --numa-scheduling`, the admin kubeconfig) and kube-schedulers
started on demand, so the pods of a throughput run are all waiting before one begins.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from benchmarks.scale.api import Api
from e2e import procs
from e2e.cluster import bin_dir
from e2e.controlplane.numa_scheduler import NAME as NUMA_SCHEDULER
from e2e.controlplane.numa_scheduler import overlay_flags, overlay_objects
from e2e.controlplane.start import CONTROLLERS, ControlPlane, start_control_plane
from e2e.kube import Kubectl, get_url
from e2e.state import tmpfs_dir
from e2e.topoplace.install import REPO, VENV_BIN

__all__ = ["BENCH_CONTROLLERS", "OFF_CONTROLLERS", "Stack", "running_stack"]

# Off: they would taint and evict Nodes whose (absent) kubelet never renews its Lease.
OFF_CONTROLLERS = ("node-lifecycle-controller", "taint-eviction-controller")
# Both schedulers' client limits, alike (issue 45): at kube-scheduler's default (`--kube-api-qps`
# 50, burst 100) both bind ~55.5 pods/s whatever they do, so the ratio would measure the rate
# limiter, not the extender.
SCHEDULER_CLIENT = {"qps": 1000, "burst": 2000}
BENCH_CONTROLLERS = tuple(c for c in CONTROLLERS if c not in OFF_CONTROLLERS)
NAMESPACE = "ml-scale"
_CRD = REPO / "manifests" / "components" / "noderesourcetopology-crd" / "crd.yaml"
_WEBHOOK_CONFIG = REPO / "manifests" / "base" / "webhook" / "mutatingwebhookconfiguration.yaml"
_FULL_LINES = ("node cache: listed nodes", "NodeResourceTopology cache: listed")


class Stack:
    def __init__(self, cp: ControlPlane, say: Callable[[str], None]) -> None:
        self.cp = cp
        self.say = say
        self.api = Api(cp)
        self.kubectl = Kubectl(cp.bin / "kubectl", cp.admin_kubeconfig)
        self.webhook_port = 0
        self.webhook_ca = cp.state / "webhook-tls" / "ca.crt"

    # --- the webhook ------------------------------------------------------------------------
    def start_webhook(self) -> tuple[int, float]:
        """(pid, seconds from start until both caches logged their first full list)."""
        procs.stop(self.cp.state, "webhook")
        log = procs.log_path(self.cp.state, "webhook")
        log.unlink(missing_ok=True)
        self.webhook_port = procs.free_port()
        started = time.monotonic()
        pid = procs.start(
            self.cp.state,
            "webhook",
            [
                str(VENV_BIN / "topoplace-webhook"),
                "serve",
                f"--policies={REPO / 'policies'}",
                "--self-signed",
                f"--self-signed-dir={self.webhook_ca.parent}",
                f"--port={self.webhook_port}",
                "--metrics-port=-1",
                "--node-cache",
                "--numa-scheduling",
                f"--kubeconfig={self.cp.admin_kubeconfig}",
            ],
        )
        procs.wait_for(
            lambda: all(line in log.read_text() for line in _FULL_LINES),
            "the webhook's node and NodeResourceTopology caches to list",
            timeout=600,
            interval=0.05,
            watch=lambda: procs.check_alive(self.cp.state, "webhook"),
        )
        return pid, time.monotonic() - started

    def register_webhook(self) -> None:
        """The MutatingWebhookConfiguration of manifests/base, pointed at the host process."""
        docs = yaml.safe_load_all(_WEBHOOK_CONFIG.read_text())
        config = next(d for d in docs if d and d["kind"] == "MutatingWebhookConfiguration")
        config["metadata"]["name"] = "topoplace-scale-bench"
        bundle = base64.b64encode(self.webhook_ca.read_bytes()).decode()
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"].get("path", "/mutate")
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{self.webhook_port}{path}",
                "caBundle": bundle,
            }
        self.kubectl.apply(config)

    # --- schedulers -------------------------------------------------------------------------
    @contextlib.contextmanager
    def scheduler(self, name: str) -> Iterator[None]:
        """kube-scheduler with profile `name` (default-scheduler: the stock configuration;
        topoplace-numa-scheduler: the overlay's, its extender at the host webhook)."""
        state = self.cp.state
        config: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
        }
        flags: list[str] = []
        if name == NUMA_SCHEDULER:
            objects = overlay_objects()
            config = yaml.safe_load(objects[("ConfigMap", name)]["data"]["config.yaml"])
            for extender in config["extenders"]:
                extender["urlPrefix"] = f"https://127.0.0.1:{self.webhook_port}/scheduler"
                extender["tlsConfig"] = {"caFile": str(self.webhook_ca)}
            flags = overlay_flags(objects)
        config["clientConnection"] = {
            "kubeconfig": str(state / "kubeconfigs" / "kube-scheduler.kubeconfig"),
            **SCHEDULER_CLIENT,
        }
        config["leaderElection"] = {"leaderElect": False}
        path = state / f"bench-{name}.yaml"
        path.write_text(json.dumps(config))
        port = procs.free_port()
        proc = f"bench-{name}"
        procs.start(
            state,
            proc,
            [
                str(self.cp.bin / "kube-scheduler"),
                f"--config={path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                *[f for f in flags if not f.startswith("--v=")],
            ],
            env={"NO_PROXY": "127.0.0.1", "HTTPS_PROXY": "", "HTTP_PROXY": ""},
        )
        try:
            procs.wait_for(
                lambda: get_url(f"https://127.0.0.1:{port}/healthz", verify=False).strip() == "ok",
                f"{proc} /healthz",
                timeout=60,
                watch=lambda: procs.check_alive(state, proc),
            )
            yield
        finally:
            procs.stop(state, proc)


@contextlib.contextmanager
def running_stack(state: Path, say: Callable[[str], None]) -> Iterator[Stack]:
    """A fresh control plane in `state` with the CRD and the bench namespace; everything it
    started is stopped and its state removed on the way out, whatever happened."""
    procs.stop_all(state)
    shutil.rmtree(state, ignore_errors=True)
    etcd = tmpfs_dir(state) / "etcd"
    etcd.mkdir(parents=True, exist_ok=True)
    try:
        cp = start_control_plane(state, bin_dir(), etcd, say, controllers=BENCH_CONTROLLERS)
        procs.stop(state, "kube-scheduler")  # the bench starts its own when the pods wait
        stack = Stack(cp, say)
        stack.kubectl("apply", "-f", str(_CRD))
        stack.kubectl("create", "namespace", NAMESPACE)
        procs.wait_for(
            lambda: (
                stack.kubectl.run("get", "sa", "default", "-n", NAMESPACE, check=False).returncode
                == 0
            ),
            f"serviceaccount default in {NAMESPACE}",
        )
        yield stack
    finally:
        stopped = procs.stop_all(state, ["webhook", "bench-" + NUMA_SCHEDULER])
        shutil.rmtree(tmpfs_dir(state), ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
        say(f"torn down: stopped {len(stopped)} processes, removed {state}")
