"""Day-2 monitoring on the real kubelets and the real Prometheus `make cluster` runs: it finds
our pods through the PodMonitors (as an operator would) and evaluates the shipped rules at
shortened thresholds (e2e/addons/prometheus.py). A Burstable GPU pod raises the misalignment
alert; a pod its kubelet refuses with TopologyAffinityError is counted and alerted on; a
stopped agent raises the stale-labels alert; and, after those, every dashboard panel's query
returns a series and its variables resolve."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from e2e import procs
from e2e.addons import prometheus
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from e2e.topoplace.containers import container_id, container_pid
from e2e.topoplace.install import agent_pods, wait_agents_ready
from tests.e2e.helpers import REPO, training_pod, wait_bound
from tests.e2e.kubelet_truth import wait_admitted_or_refused

DASHBOARD = REPO / "manifests" / "components" / "monitoring" / "topoplace-dashboard.json"
STOPPED_NODE = "pcie-l40s"  # a GPU node no scenario here places on
REFUSING_NODE = "dgx-a100-nps4"  # one NUMA node (NPS4) holds 2 GPUs but not 192Gi


@pytest.fixture(scope="module")
def url(cluster: Cluster) -> str:
    scraper = cluster.info.get("prometheus")
    if not scraper:
        pytest.skip(f"this cluster runs no Prometheus ({prometheus.OPT_OUT}=0)")
    return str(scraper["url"])


@pytest.fixture(scope="module")
def ns(kubectl: Kubectl) -> Iterator[str]:
    """One namespace for the module: its pods stay until the dashboard check has run."""
    name = f"ml-e2e-mon-{secrets.token_hex(3)}"
    kubectl("create", "namespace", name)
    procs.wait_for(
        lambda: kubectl.run("get", "sa", "default", "-n", name, check=False).returncode == 0,
        f"serviceaccount default in {name}",
    )
    yield name
    kubectl.run(
        "delete", "pods", "--all", "-n", name, "--grace-period=1", "--timeout=90s",
        check=False, timeout=120,
    )  # fmt: skip
    kubectl.run("delete", "namespace", name, "--wait=false", check=False)


def _create(kubectl: Kubectl, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    out = kubectl("create", "-n", namespace, "-f", "-", "-o", "json", input=json.dumps(obj))
    return dict(json.loads(out))


def firing(url: str, alert: str, **labels: str) -> dict[str, Any] | None:
    for a in prometheus.query(url, "", path="/api/v1/alerts")["alerts"]:
        same = all(a["labels"].get(k) == v for k, v in labels.items())
        if a["labels"]["alertname"] == alert and a["state"] == "firing" and same:
            return dict(a)
    return None


def wait_firing(url: str, alert: str, timeout: float = 120, **labels: str) -> dict[str, Any]:
    return procs.wait_for(
        lambda: firing(url, alert, **labels),
        f"alert {alert} {labels} firing in Prometheus",
        timeout=timeout,
        interval=1,
    )


def burstable_twin() -> dict[str, Any]:
    """The inference pod without its policy label: no Guaranteed resources, shared CPUs."""
    container = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.6.3",
        "resources": {"limits": {"nvidia.com/gpu": 2}, "requests": {"cpu": "1"}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "twin"},
        "spec": {
            "containers": [container],
            "nodeSelector": {"node.kubernetes.io/instance-type": "dgx-h100"},
        },
    }


def test_a_burstable_gpu_pod_raises_the_misalignment_alert(
    kubectl: Kubectl, url: str, ns: str
) -> None:
    created = _create(kubectl, ns, burstable_twin())
    assert created["status"]["qosClass"] == "Burstable"
    node = wait_bound(kubectl, ns, "twin")
    assert wait_admitted_or_refused(kubectl, ns, "twin") == ("Running", "")
    alert = wait_firing(url, "TopoplaceGPUContainersMisaligned", node=node, namespace=ns)
    assert alert["labels"]["verdict"] == "shared-cpus"
    assert "kubectl topoplace audit" in alert["annotations"]["description"]


def test_a_pod_its_kubelet_refuses_is_counted_and_alerted(
    kubectl: Kubectl, url: str, ns: str
) -> None:
    limits = {"cpu": "4", "memory": "192Gi", "nvidia.com/gpu": 2}
    container = {"name": "trainer", "image": "busybox:1", "resources": {"limits": limits}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "refused"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": REFUSING_NODE},
            "containers": [container],
        },
    }
    _create(kubectl, ns, pod)
    wait_bound(kubectl, ns, "refused")
    assert wait_admitted_or_refused(kubectl, ns, "refused") == ("Failed", "TopologyAffinityError")
    series = f'topoplace_agent_kubelet_refusals_total{{node="{REFUSING_NODE}",namespace="{ns}"}}'
    counted = procs.wait_for(
        lambda: prometheus.query(url, series)["result"],
        f"{series} scraped",
        timeout=60,
        interval=1,
    )
    assert [s["metric"]["reason"] for s in counted] == ["TopologyAffinityError"]
    assert float(counted[0]["value"][1]) == 1
    wait_firing(url, "TopoplaceKubeletRefusedPods", node=REFUSING_NODE, namespace=ns)


@contextlib.contextmanager
def frozen(*pids: int) -> Iterator[None]:
    """SIGSTOP these processes; SIGCONT them on the way out, in reverse order."""
    stopped: list[int] = []
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        yield
    finally:
        for pid in reversed(stopped):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def test_a_stopped_agent_raises_the_stale_labels_alert(
    cluster: Cluster, kubectl: Kubectl, url: str
) -> None:
    assert firing(url, "TopoplaceNodeLabelsStale", node=STOPPED_NODE) is None
    agent = container_pid(container_id(agent_pods(kubectl)[STOPPED_NODE], "agent"))
    assert agent is not None, f"no agent process on {STOPPED_NODE}"
    # The kubelet is frozen too: its liveness probe would restart the agent before the
    # shortened bound (above the agents' 60 s resync) is reached.
    kubelet = procs.running(cluster.state)[f"kubelet-{STOPPED_NODE}"]
    with frozen(kubelet, agent):
        alert = wait_firing(url, "TopoplaceNodeLabelsStale", timeout=180, node=STOPPED_NODE)
    assert "not synced" in alert["annotations"]["summary"]
    wait_agents_ready(kubectl, [STOPPED_NODE])
    kubectl("wait", "--for=condition=Ready", f"node/{STOPPED_NODE}", "--timeout=120s")
    procs.wait_for(  # the next scenario must find the node schedulable, as before
        lambda: (
            not any(
                t["key"].startswith("node.kubernetes.io/")
                for t in kubectl.json("get", "node", STOPPED_NODE)["spec"].get("taints") or []
            )
        ),
        f"the node lifecycle controller untainting {STOPPED_NODE}",
        timeout=60,
    )


def _panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def test_every_dashboard_panel_and_variable_returns_data(
    kubectl: Kubectl, url: str, ns: str
) -> None:
    # An opted-in pod, so the admissions-by-policy panel has a policy to show.
    _create(kubectl, ns, training_pod("opted-in", "single-numa-partial", 1))
    procs.wait_for(
        lambda: prometheus.query(
            url, 'topoplace_webhook_admission_requests_total{policy="single-numa-partial"}'
        )["result"],
        "the opted-in pod's admission scraped",
        timeout=60,
        interval=1,
    )
    for title, expr in _panel_queries():
        procs.wait_for(
            lambda expr=expr: prometheus.query(url, prometheus.panel_query(expr))["result"],
            f"a series for panel {title!r}: {expr}",
            timeout=30,
            interval=1,
        )
    variables = json.loads(DASHBOARD.read_text())["templating"]["list"]
    for var in variables:
        if var["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((\w+), (\w+)\)", var["query"]["query"])
        assert m, var
        values = prometheus.query(url, "", path=f"/api/v1/label/{m[2]}/values?match[]={m[1]}")
        assert values, f"variable {var['name']} resolves to nothing"
    nodes = prometheus.query(url, "", path="/api/v1/label/node/values?match[]=up")
    assert ns in prometheus.query(
        url,
        "",
        path="/api/v1/label/namespace/values?match[]=topoplace_agent_gpu_container_alignment",
    )
    assert STOPPED_NODE in nodes
