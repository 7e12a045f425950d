"""What the scenarios check with, the way a platform engineer checks with kubectl."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from e2e import procs
from e2e.cluster import Cluster
from e2e.controlplane.audit import lines_of, read_writes
from e2e.kube import Kubectl, get_url
from e2e.topoplace.install import pods_of
from tests.kube import parse_quantity

REPO = Path(__file__).resolve().parents[2]
WEBHOOK = str(Path(sys.executable).with_name("topoplace-webhook"))
PLUGIN = str(Path(sys.executable).with_name("kubectl-topoplace"))
AGENT_USER = "system:serviceaccount:topoplace-system:topoplace-agent"


def serve_engine_flags(kubectl: Kubectl) -> list[str]:
    """The engine flags the deployed webhook passes to `serve`, for the offline `mutate`."""
    deployment = kubectl.json("get", "deployment", "topoplace-webhook", "-n", "topoplace-system")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    serve = next(c for c in containers if c["name"] == "serve")
    engine = ("--dataset-cache-root=", "--prefetch-image=", "--on-missing-policy=")
    return [a for a in serve["args"] if a.startswith(engine)]


def predict(kubectl: Kubectl, obj: dict[str, Any], namespace: str, policies: Path) -> list[Any]:
    """`topoplace-webhook mutate --output pod`: the pods (or templates) the webhook should store."""
    done = subprocess.run(
        [
            WEBHOOK,
            "mutate",
            f"--policies={policies}",
            f"--namespace={namespace}",
            "--output=pod",
            *serve_engine_flags(kubectl),
            "-",
        ],
        input=json.dumps(obj),
        capture_output=True,
        text=True,
        check=True,
    )
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def template_spec(doc: dict[str, Any]) -> dict[str, Any]:
    """The pod spec of a Pod, or of a workload's pod template."""
    if doc["kind"] == "Pod":
        return doc["spec"]
    return doc["spec"]["template"]["spec"]


def assert_subset(expected: Any, actual: Any, where: str = "") -> None:
    """Every field `expected` sets has that value in `actual` (which may hold more: defaults)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected an object, stored {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{where}.{key}: missing from the stored object"
            assert_subset(value, actual[key], f"{where}.{key}")
    elif isinstance(expected, list) and _named(expected):
        # Containers, env, volumes, mounts: matched by name, since the API server and the
        # controllers add their own (the token volume, JOB_COMPLETION_INDEX).
        assert isinstance(actual, list) and _named(actual), f"{where}: stored {actual!r}"
        stored = {item["name"]: item for item in actual}
        for item in expected:
            assert item["name"] in stored, f"{where}: {item['name']!r} missing from the stored list"
            assert_subset(item, stored[item["name"]], f"{where}[{item['name']}]")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{where}: expected a list, stored {actual!r}"
        assert len(expected) == len(actual), (
            f"{where}: {len(expected)} items expected, {len(actual)} stored: {actual!r}"
        )
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            assert_subset(e, a, f"{where}[{i}]")
    elif ".resources." in where:
        # The API server stores quantities in canonical form: 2 → "2", "1.5" → "1500m".
        same = parse_quantity(str(expected)) == parse_quantity(str(actual))
        assert same, f"{where}: expected {expected!r}, stored {actual!r}"
    else:
        assert expected == actual, f"{where}: expected {expected!r}, stored {actual!r}"


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def pods(kubectl: Kubectl, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    args = ["get", "pods", "-n", namespace] + (["-l", selector] if selector else [])
    return kubectl.json(*args)["items"]


def wait_pods(kubectl: Kubectl, namespace: str, selector: str, count: int) -> list[dict]:
    return procs.wait_for(
        lambda: (found := pods(kubectl, namespace, selector)) and len(found) >= count and found,
        f"{count} pods {selector} in {namespace}",
    )


def wait_bound(kubectl: Kubectl, namespace: str, name: str, timeout: float = 30) -> str:
    """The node kube-scheduler binds pod `name` to."""
    return procs.wait_for(
        lambda: kubectl.json("get", "pod", name, "-n", namespace)["spec"].get("nodeName"),
        f"pod {namespace}/{name} bound to a node by kube-scheduler",
        timeout=timeout,
    )


def events(kubectl: Kubectl, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    found = kubectl.json(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        f"involvedObject.name={name},reason={reason}",
    )["items"]
    return found


def node_labels(kubectl: Kubectl, node: str) -> dict[str, str]:
    return kubectl.json("get", "node", node)["metadata"].get("labels", {})


def webhook_ips(kubectl: Kubectl) -> list[str]:
    """The pod IPs of the webhook replicas."""
    return [p["status"]["podIP"] for p in pods_of(kubectl, "topoplace-webhook")]


def webhook_metrics(kubectl: Kubectl) -> list[str]:
    """Each webhook replica's Prometheus text, scraped on its own pod IP (`serve
    --metrics-port=9102`, as in the Deployment)."""
    return [get_url(f"http://{ip}:9102/metrics") for ip in webhook_ips(kubectl)]


def metric(kubectl: Kubectl, name: str, labels: str = "") -> float:
    """The metric summed over the webhook replicas, each scraped on its own pod IP."""
    pattern = re.compile(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", re.M)
    total = 0.0
    for text in webhook_metrics(kubectl):
        found = pattern.search(text)
        total += float(found.group(1)) if found else 0.0
    return total


def probe(name: str = "probe") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{name}-",
            "labels": {"topoplace.io/policy": "single-numa-partial"},
        },
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                    "resources": {"limits": {"nvidia.com/gpu": 2}},
                }
            ]
        },
    }


def admitted(create: Callable[..., Any], namespace: str) -> dict[str, Any]:
    """What a dry-run create stores: the webhook's answer, leaving nothing behind."""
    return json.loads(create(probe(), namespace, "--dry-run=server").stdout)


def phase(kubectl: Kubectl, namespace: str, name: str, want: str) -> dict[str, Any] | None:
    """The pod once its phase is `want`, else None: a condition for procs.wait_for."""
    pod = kubectl.json("get", "pod", name, "-n", namespace)
    return pod if pod["status"].get("phase") == want else None


def patch_policies(kubectl: Kubectl, data: dict[str, str | None], *, wait: bool = True) -> None:
    """Merge `data` into the policies ConfigMap as an operator would (None removes a file);
    with `wait`, return once every webhook replica serves as many policies as it now holds
    (each replica's kubelet projects the edit on its own sync)."""
    kubectl(
        "patch",
        "configmap",
        "topoplace-policies",
        "-n",
        "topoplace-system",
        "--type=merge",
        "-p",
        json.dumps({"data": data}),
    )
    if not wait:
        return
    files = kubectl.json("get", "configmap", "topoplace-policies", "-n", "topoplace-system")
    expected = sum(
        1
        for text in files["data"].values()
        for doc in yaml.safe_load_all(text)
        if doc and doc.get("kind") == "PlacementPolicy"
    )

    def served() -> bool:
        pods = kubectl.json(
            "get",
            "pods",
            "-n",
            "topoplace-system",
            "-l",
            "app.kubernetes.io/name=topoplace-webhook",
        )["items"]
        ips = [p["status"]["podIP"] for p in pods if p["status"].get("podIP")]
        return bool(ips) and all(
            f"topoplace_webhook_policies_loaded {float(expected)}"
            in get_url(f"http://{ip}:9102/metrics")
            for ip in ips
        )

    procs.wait_for(served, f"every webhook replica serving {expected} policies", timeout=90)


def training_pod(
    name: str, policy: str, gpus: int, *, machine: str | None = None
) -> dict[str, Any]:
    """An opted-in torchrun pod asking for `gpus` GPUs, optionally pinned to a machine class."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "trainer",
                "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                "command": ["torchrun", f"--nproc-per-node={gpus}", "train.py"],
                "resources": {"limits": {"nvidia.com/gpu": gpus}},
            }
        ],
    }
    if machine is not None:
        spec["nodeSelector"] = {"node.kubernetes.io/instance-type": machine}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"topoplace.io/policy": policy}},
        "spec": spec,
    }


def explain(cluster: Cluster, obj: dict[str, Any], namespace: str, tmp: Path) -> dict[str, Any]:
    """`kubectl topoplace explain --output json` as a user runs it (current context)."""
    path = tmp / f"{obj['metadata']['name']}.yaml"
    path.write_text(json.dumps(obj))
    done = subprocess.run(
        [
            PLUGIN,
            "explain",
            f"--policies={REPO / 'policies'}",
            f"--namespace={namespace}",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--output=json",
            str(path),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode in (0, 1), done.stderr  # 0: some node fits, 1: none
    assert done.stdout, done.stderr  # a crash exits 1 too, with nothing on stdout
    result = json.loads(done.stdout)
    assert (done.returncode == 0) == any(n["fits"] for n in result["nodes"])
    return result


def cluster_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "e2e.cluster", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )


def node_writes(cluster: Cluster, node: str) -> int:
    """The agent's writes to `node` that reached the API server, from its audit log."""
    writes, _ = read_writes(lines_of(Path(cluster.info["audit_log"])))
    return sum(
        w.resource == "nodes" and w.name == node and w.verb in ("patch", "update")
        and w.user == AGENT_USER
        for w in writes
    )  # fmt: skip
