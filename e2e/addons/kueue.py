"""Kueue on the local cluster: its CRDs, its controller manager as a host process on
127.0.0.1, and its webhooks, as its own manifests (config/components) would install them.

Kueue is built from the Go module proxy by `make e2e-bin` into a cache keyed by version
(e2e/versions.sh); its CRDs and webhook manifests come from the same module, and JobSet's CRD
from the JobSet module Kueue requires (no JobSet controller runs: a JobSet's Workload is
made and admitted, its Jobs never). Only what the e2e scenarios need changes:
- the webhook Service is an ExternalName for 127.0.0.1 (Kueue runs on the host, not in a pod),
  so the API server resolves it to Kueue's port there, through the same egress proxy as every
  webhook call. The serving pair and the caBundles come from Kueue's internal certificate
  management, as with its default manifests (with it off, v0.17 insists on metrics
  certificates at the fixed host path /etc/kueue/metrics/certs);
- only the webhooks of Kueue's own kinds and of the integrations enabled here (batch/job,
  jobset.x-k8s.io/jobset), so a Pod, Deployment or StatefulSet never waits on Kueue;
- the controller manager authenticates with the admin kubeconfig (a test cluster);
- the visibility API server (an aggregated API) is off.

The cluster gets ResourceFlavor `default-flavor` and ClusterQueue `QUEUE` with cpu, memory and
nvidia.com/gpu quota for every namespace; a scenario adds a LocalQueue to its namespace.

Started by default; TOPOPLACE_E2E_KUEUE=0 (for `make e2e-bin` and `make cluster`) leaves
Kueue out, and tests/e2e/test_kueue.py then skips, saying so. In a pod the kubelet projects
the certificate Secret into certDir; here `start` writes the pair there as soon as Kueue's
certificate manager has filled the Secret.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from e2e import procs
from e2e.kube import Kubectl
from e2e.versions import cache_dir

__all__ = [
    "CLUSTER_QUEUE",
    "FLAVOR",
    "NAMESPACE",
    "OPT_OUT",
    "QUEUE_NAME_LABEL",
    "cluster_queue",
    "kueue_dir",
    "local_queue",
    "start",
    "wanted",
    "webhook_configurations",
]

NAMESPACE = "kueue-system"
SERVICE = "kueue-webhook-service"  # Kueue's defaults: its certificates name these
SECRET = "kueue-webhook-server-cert"
FLAVOR = "default-flavor"
CLUSTER_QUEUE = "topoplace-e2e"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
API = "kueue.x-k8s.io/v1beta2"
# API groups whose webhooks are kept: Kueue's own kinds and the integrations enabled below.
_GROUPS = {"kueue.x-k8s.io", "batch", "jobset.x-k8s.io"}
_FRAMEWORKS = ["batch/job", "jobset.x-k8s.io/jobset"]
REPO = Path(__file__).resolve().parents[2]
OPT_OUT = "TOPOPLACE_E2E_KUEUE"  # =0: no Kueue

Say = Callable[[str], None]


def wanted() -> bool:
    """Whether this cluster runs Kueue: yes unless TOPOPLACE_E2E_KUEUE=0."""
    return os.environ.get(OPT_OUT, "1") != "0"


def kueue_dir() -> Path:
    """The cache directory of the pinned Kueue: bin/kueue and config/ (its module's)."""
    return cache_dir("e2e_kueue_dir")


def cluster_queue(name: str, *, cpu: str, memory: str, gpus: int) -> dict[str, Any]:
    """A ClusterQueue for every namespace, with one flavor and these quotas."""
    quotas = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": list(quotas),
                    "flavors": [
                        {
                            "name": FLAVOR,
                            "resources": [
                                {"name": k, "nominalQuota": v} for k, v in quotas.items()
                            ],
                        }
                    ],
                }
            ],
        },
    }


def local_queue(name: str, namespace: str, cluster_queue: str = CLUSTER_QUEUE) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }


def webhook_configurations(config: Path, port: int) -> list[dict[str, Any]]:
    """Kueue's webhook configurations from its manifests, named as its kustomization names
    them (its certificate manager fills their caBundle by those names), pointing at our
    Service and port, kept to `_GROUPS`."""
    docs = [d for d in yaml.safe_load_all((config / "webhook" / "manifests.yaml").read_text()) if d]
    out = []
    for doc in docs:
        doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
        kept = []
        for hook in doc.get("webhooks") or []:
            groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            if not groups <= _GROUPS:
                continue
            service = hook["clientConfig"]["service"]
            service.update(name=SERVICE, namespace=NAMESPACE, port=port)
            kept.append(hook)
        doc["webhooks"] = kept
        out.append(doc)
    return out


def _config(directory: Path, *, webhook_port: int, probe_port: int, certs: Path) -> Path:
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        "metrics": {"bindAddress": "0"},  # off: nothing scrapes it here
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": True},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": _FRAMEWORKS},
    }
    path = directory / "kueue-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def start(state: Path, k: Kubectl, kubeconfig: Path, say: Say) -> dict[str, Any]:
    """CRDs, webhooks, controller manager, the default queue; returns what the tests need."""
    home = kueue_dir()
    config = home / "config" / "components"
    webhook_port, probe_port = procs.free_port(), procs.free_port()
    crds = _crds(config, webhook_port) + _crds_in(home / "jobset-crds")
    payload = json.dumps({"apiVersion": "v1", "kind": "List", "items": crds})
    k.run("apply", "--server-side", "-f", "-", input=payload)  # too large for client-side
    names = [f"crd/{crd['metadata']['name']}" for crd in crds]
    k.run("wait", "--for=condition=Established", "--timeout=60s", *names, timeout=70)
    here = state / "kueue"
    certs = here / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    k.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE},
        "spec": {
            "type": "ExternalName",
            "externalName": "127.0.0.1",
            "ports": [{"port": webhook_port, "protocol": "TCP"}],
        },
    }
    # The Secret its certificate manager fills (config/components/internalcert), and the
    # configurations whose caBundle it sets: both must be there before it starts.
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NAMESPACE},
    }
    k.apply([service, secret, *webhook_configurations(config, webhook_port)])
    path = _config(here, webhook_port=webhook_port, probe_port=probe_port, certs=certs)
    argv = [
        str(home / "bin" / "kueue"),
        f"--config={path}",
        "--feature-gates=VisibilityOnDemand=false",
    ]
    procs.start(state, "kueue", argv, env={"KUBECONFIG": str(kubeconfig)})
    # In a pod the kubelet projects the Secret into certDir; Kueue waits for the files there.
    pair = procs.wait_for(
        lambda: _serving_pair(k),
        f"Kueue's certificate manager filling Secret {NAMESPACE}/{SECRET}",
        timeout=120,
        interval=1,
        watch=lambda: procs.check_alive(state, "kueue"),
    )
    for name, data in pair.items():
        (certs / f"{name}.tmp").write_bytes(data)
        (certs / f"{name}.tmp").replace(certs / name)
    # Ready when its webhooks answer through the Service (they validate these objects): that
    # needs its certificates made and the caBundles filled, so it is what to wait for.
    flavor = {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}}
    default_queue = cluster_queue(CLUSTER_QUEUE, cpu="1000", memory="8Ti", gpus=64)
    payload = json.dumps({"apiVersion": "v1", "kind": "List", "items": [flavor, default_queue]})
    procs.wait_for(
        lambda: k.run("apply", "-f", "-", input=payload, check=False).returncode == 0,
        "ResourceFlavor and ClusterQueue created through Kueue's webhooks",
        timeout=180,
        interval=1,
        watch=lambda: procs.check_alive(state, "kueue"),
    )
    say(f"Kueue on 127.0.0.1:{webhook_port} (webhooks), ClusterQueue {CLUSTER_QUEUE}")
    return {"webhook_port": webhook_port, "probe_port": probe_port, "cluster_queue": CLUSTER_QUEUE}


def _serving_pair(k: Kubectl) -> dict[str, bytes] | None:
    data = k.json("get", "secret", SECRET, "-n", NAMESPACE).get("data") or {}
    if not all(data.get(key) for key in ("tls.crt", "tls.key", "ca.crt")):
        return None
    return {key: base64.b64decode(data[key]) for key in ("tls.crt", "tls.key")}


def _crds_in(directory: Path) -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted(directory.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == "CustomResourceDefinition"
    ]


def _crds(config: Path, port: int) -> list[dict[str, Any]]:
    """Kueue's CRDs with the conversion webhooks its kustomization patches in (several API
    versions: v1beta1 is converted by Kueue), pointing at our Service and port.

    Only the patches its kustomization lists: v0.17 ships webhook_in_resourceflavors.yaml
    but leaves it out, and its certificate manager never fills that CRD's caBundle, so the
    API server could not verify the call and failed every ResourceFlavor read it converts."""
    kustomization = yaml.safe_load((config / "crd" / "kustomization.yaml").read_text())
    listed = {entry["path"] for entry in kustomization.get("patches") or []}
    out = []
    for crd in _crds_in(config / "crd" / "bases"):
        name = f"patches/webhook_in_{crd['spec']['names']['plural']}.yaml"
        patch = config / "crd" / name
        if name in listed:
            conversion = yaml.safe_load(patch.read_text())["spec"]["conversion"]
            service = conversion["webhook"]["clientConfig"]["service"]
            service.update(name=SERVICE, namespace=NAMESPACE, port=port)
            crd["spec"]["conversion"] = conversion
        out.append(crd)
    return out
