"""etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1; the nodes'
kubelets join it (e2e/nodes)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from e2e import procs
from e2e.controlplane.audit import AUDIT_BACKUPS, AUDIT_MAX_MB, AUDIT_POLICY
from e2e.controlplane.pki import Pki, make_pki
from e2e.kube import get_url, write_kubeconfig

__all__ = [
    "CONTROLLERS",
    "WORKLOAD_SCHEDULING",
    "ControlPlane",
    "start_control_plane",
    "workload_scheduling_args",
]

SERVICE_CIDR = "10.0.0.0/24"

# =1: a cluster with Kubernetes' own gang and topology-aware scheduling on (the
# scheduling.k8s.io/v1beta1 API and its three gates, on the API server, the controller manager
# and the scheduler), for tests/e2e/test_podgroups.py (`make e2e-podgroups`). The default
# cluster has them off, as Kubernetes v1.37 does.
WORKLOAD_SCHEDULING = "TOPOPLACE_E2E_WORKLOAD_SCHEDULING"
_WORKLOAD_GATES = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true,WorkloadWithJob=true"


def workload_scheduling_args(component: str) -> list[str]:
    """The extra flags of `component` when $TOPOPLACE_E2E_WORKLOAD_SCHEDULING=1, else none."""
    if os.environ.get(WORKLOAD_SCHEDULING, "0") != "1":
        return []
    extra = [f"--feature-gates={_WORKLOAD_GATES}"]
    if component == "kube-apiserver":
        extra.append("--runtime-config=scheduling.k8s.io/v1beta1=true")
    return extra


# Everything the product's objects and the kubelets need, as in production: node-lifecycle
# taints a node whose kubelet stops renewing its Lease, taint-eviction and pod GC clean up.
CONTROLLERS = (
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "pod-garbage-collector-controller",
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "job-controller",
    "cronjob-controller",
    "daemonset-controller",
    "disruption-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "clusterrole-aggregation-controller",
    "resourceclaim-controller",
    "ttl-after-finished-controller",
)


@dataclass(frozen=True)
class ControlPlane:
    state: Path
    bin: Path
    pki: Pki
    server: str
    admin_kubeconfig: Path
    etcd_data: Path
    # Environment the e2e runtime gives every container of our image: the egress proxy, and
    # the add-ons a pod would reach by name in a real cluster (the object store).
    pod_env: dict[str, str] = field(default_factory=dict)

    @property
    def audit_log(self) -> Path:
        return procs.log_path(self.state, "audit")


def _ready(url: str, pki: Pki, *, client: str | None = None, verify: bool = True) -> bool:
    cert = (pki.cert(client), pki.key(client)) if client else None
    return get_url(url, ca=pki.ca, cert=cert, verify=verify).strip() in (
        "ok",
        '{"health":"true","reason":""}',
    )


def _start_service_proxy(state: Path, kubeconfig: Path) -> tuple[Path, dict[str, str]]:
    """kube-proxy's stand-in (serviceproxy.py) and the API server's egress config that uses it;
    the proxy environment of the pods."""
    socket = state / "service-proxy.sock"
    port = procs.free_port()
    procs.start(
        state,
        "service-proxy",
        [
            sys.executable,
            "-m",
            "e2e.controlplane.serviceproxy",
            f"--kubeconfig={kubeconfig}",
            f"--socket={socket}",
            f"--port={port}",
        ],
    )
    procs.wait_for(
        socket.is_socket,
        f"the service proxy on {socket}",
        timeout=30,
        watch=lambda: procs.check_alive(state, "service-proxy"),
    )
    config = state / "egress-selector.json"
    connection = {"proxyProtocol": "HTTPConnect", "transport": {"uds": {"udsName": str(socket)}}}
    config.write_text(
        json.dumps(
            {
                "apiVersion": "apiserver.k8s.io/v1beta1",
                "kind": "EgressSelectorConfiguration",
                "egressSelections": [{"name": "cluster", "connection": connection}],
            }
        )
    )
    proxy = f"http://127.0.0.1:{port}"
    # NO_PROXY: Python reads names and addresses, Rust clients also the CIDR.
    no_proxy = "127.0.0.1,localhost,127.0.0.0/8"
    env = {"HTTPS_PROXY": proxy, "HTTP_PROXY": proxy, "NO_PROXY": no_proxy}
    return config, env


def start_control_plane(
    state: Path, bin_dir: Path, etcd_data: Path, say, *, controllers: tuple[str, ...] = CONTROLLERS
) -> ControlPlane:
    """`controllers`: kube-controller-manager's list (the scale bench leaves node-lifecycle
    out, so Nodes with no kubelet stay Ready, as kube-scheduler's scheduler_perf does)."""
    pki = make_pki(state / "pki")
    say("PKI generated (one CA, serving and client pairs, service-account key)")
    etcd_url = _start_etcd(state, bin_dir, etcd_data, say)
    server, admin, pod_env = _start_apiserver(state, bin_dir, pki, etcd_url, say)
    _start_controllers(state, bin_dir, pki, server, controllers, say)
    return ControlPlane(state, bin_dir, pki, server, admin, etcd_data, pod_env)


def _start_etcd(state: Path, bin_dir: Path, etcd_data: Path, say) -> str:
    """etcd on two free loopback ports, data on tmpfs; returns its client URL once healthy."""
    etcd_port, peer_port = procs.free_port(), procs.free_port()
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    peer_url = f"http://127.0.0.1:{peer_port}"
    procs.start(
        state,
        "etcd",
        [
            str(bin_dir / "etcd"),
            f"--data-dir={etcd_data}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            "--unsafe-no-fsync",  # data on tmpfs: nothing to sync to
            "--log-level=warn",
        ],
    )
    procs.wait_for(
        lambda: json.loads(get_url(f"{etcd_url}/health")).get("health") == "true",
        "etcd /health",
        timeout=30,
        watch=lambda: procs.check_alive(state, "etcd"),
    )
    say(f"etcd ready on {etcd_url} (data on tmpfs {etcd_data})")
    return etcd_url


def _start_apiserver(
    state: Path, bin_dir: Path, pki: Pki, etcd_url: str, say
) -> tuple[str, Path, dict[str, str]]:
    """kube-apiserver (and the service proxy it dials webhooks through) once /readyz answers:
    (its URL, the admin kubeconfig, the environment pods get from the proxy)."""
    api_port = procs.free_port()
    audit_policy = state / "audit-policy.json"
    audit_policy.write_text(json.dumps(AUDIT_POLICY))
    server = f"https://127.0.0.1:{api_port}"
    admin = write_kubeconfig(
        state / "kubeconfigs" / "admin.kubeconfig",
        server=server,
        ca=pki.ca,
        user="admin",
        cert=pki.cert("admin"),
        key=pki.key("admin"),
    )
    egress, pod_env = _start_service_proxy(state, admin)
    procs.start(
        state,
        "kube-apiserver",
        [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={api_port}",
            "--endpoint-reconciler-type=none",  # the reconciler refuses a loopback address
            f"--tls-cert-file={pki.cert('kube-apiserver')}",
            f"--tls-private-key-file={pki.key('kube-apiserver')}",
            f"--client-ca-file={pki.ca}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.dir / 'service-account.pub'}",
            f"--service-account-signing-key-file={pki.key('service-account')}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # Its calls into the cluster (webhook Services) go through kube-proxy's stand-in.
            f"--egress-selector-config-file={egress}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction,MutatingAdmissionWebhook,"
            "ValidatingAdmissionWebhook,ValidatingAdmissionPolicy",
            # For logs and exec through the kubelets (which trust the cluster CA).
            f"--kubelet-client-certificate={pki.cert('kube-apiserver-kubelet-client')}",
            f"--kubelet-client-key={pki.key('kube-apiserver-kubelet-client')}",
            f"--audit-policy-file={audit_policy}",
            f"--audit-log-path={procs.log_path(state, 'audit')}",
            "--audit-log-format=json",
            f"--audit-log-maxsize={AUDIT_MAX_MB}",
            f"--audit-log-maxbackup={AUDIT_BACKUPS}",
            "--audit-log-maxage=1",
            "--profiling=false",
            *workload_scheduling_args("kube-apiserver"),
        ],
    )
    procs.wait_for(
        lambda: _ready(f"{server}/readyz", pki, client="admin"),
        "kube-apiserver /readyz",
        timeout=90,
        watch=lambda: procs.check_alive(state, "kube-apiserver"),
    )
    say(f"kube-apiserver ready on {server}")
    return server, admin, pod_env


def _start_controllers(
    state: Path, bin_dir: Path, pki: Pki, server: str, controllers: tuple[str, ...], say
) -> None:
    """kube-controller-manager and kube-scheduler, each under its own identity, until healthy."""
    kcm_port, sched_port = procs.free_port(), procs.free_port()
    kubeconfigs = state / "kubeconfigs"
    component = {
        name: write_kubeconfig(
            kubeconfigs / f"{name}.kubeconfig",
            server=server,
            ca=pki.ca,
            user=name,
            cert=pki.cert(name),
            key=pki.key(name),
        )
        for name in ("kube-scheduler", "kube-controller-manager")
    }
    procs.start(
        state,
        "kube-controller-manager",
        [
            str(bin_dir / "kube-controller-manager"),
            f"--kubeconfig={component['kube-controller-manager']}",
            f"--controllers={','.join(controllers)}",
            "--use-service-account-credentials=true",  # each controller under its own RBAC role
            f"--service-account-private-key-file={pki.key('service-account')}",
            f"--root-ca-file={pki.ca}",
            "--leader-elect=false",
            # NotReady 20 s after a kubelet's last heartbeat (production: 50 s), so the
            # node-loss scenario does not wait a minute.
            "--node-monitor-grace-period=20s",
            "--node-monitor-period=2s",
            "--bind-address=127.0.0.1",
            f"--secure-port={kcm_port}",
            *workload_scheduling_args("kube-controller-manager"),
        ],
    )
    scheduler_config = state / "kube-scheduler.yaml"
    scheduler_config.write_text(
        json.dumps(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(component["kube-scheduler"])},
                "leaderElection": {"leaderElect": False},
            }
        )
    )
    procs.start(
        state,
        "kube-scheduler",
        [
            str(bin_dir / "kube-scheduler"),
            f"--config={scheduler_config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={sched_port}",
            *workload_scheduling_args("kube-scheduler"),
        ],
    )
    for name, port in (("kube-controller-manager", kcm_port), ("kube-scheduler", sched_port)):
        procs.wait_for(
            lambda port=port: _ready(f"https://127.0.0.1:{port}/healthz", pki, verify=False),
            f"{name} /healthz",
            timeout=60,
            watch=lambda name=name: procs.check_alive(state, name),
        )
        say(f"{name} healthy")
