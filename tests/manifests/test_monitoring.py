"""The monitoring component (issue 35) holds together: every alert is named Topoplace*, has a
runbook section and a documented patch point; every metric a rule or a dashboard panel reads is
one the agent or the webhook exports (or a recording rule); every exported metric is in the
docs' table; and the chart's `monitoring.enabled` renders the component's objects, with
`monitoring.alerts` changing what the documented kustomize patch changes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.audit.monitor import AuditMetrics
from agent.sync.health.server import AgentMetrics
from agent.sync.pod_events.prefetches import PrefetchCounts
from agent.sync.pod_events.refusals import KubeletRefusals
from e2e.addons import prometheus
from tests.chart.compare import without_helm_labels
from tests.manifests.rendered import NAMESPACE, REPO, helm
from webhook.server.cert_expiry import CertificateExpiry
from webhook.server.metrics import WebhookMetrics
from webhook.spans.watch import WorkloadSpans

COMPONENT = REPO / "manifests" / "components" / "monitoring"
DOCS = (REPO / "docs" / "monitoring.md").read_text()
GROUPS = prometheus.rule_groups()
ALERTS = [r for r in GROUPS[1]["rules"] if "alert" in r]
RECORDS = {r["record"] for g in GROUPS for r in g["rules"] if "record" in r}


def _families() -> dict[str, str]:
    """Every metric family the agent and the webhook export → its type."""
    agent = AgentMetrics()
    AuditMetrics(agent.registry)
    KubeletRefusals(agent.registry)
    PrefetchCounts(agent.registry)
    agent.track_node_resource_topology()
    webhook = WebhookMetrics()
    webhook.registry.register(CertificateExpiry(Path("/nonexistent/tls.crt")))
    webhook.registry.register(WorkloadSpans(lambda: None))  # `serve --workload-spans`
    return {m.name: m.type for r in (agent.registry, webhook.registry) for m in r.collect()}


def _series_names() -> set[str]:
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                "info": ("_info",)}  # fmt: skip
    return {
        name + suffix for name, kind in _families().items() for suffix in suffixes.get(kind, ("",))
    }


def test_alert_names_severities_and_runbooks() -> None:
    assert ALERTS
    for rule in ALERTS:
        name = rule["alert"]
        assert name.startswith("Topoplace"), name
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert "for" in rule, name
        assert f"\n### {name}\n" in DOCS, f"no runbook section for {name}"
        assert rule["annotations"]["runbook_url"] == f"docs/monitoring.md#{name.lower()}"


def test_the_docs_alert_table_gives_each_alerts_patch_index_and_default() -> None:
    rows = re.findall(r"^\| (\d+) \| `(Topoplace\w+)` \| (\w+) \|", DOCS, flags=re.M)
    assert [(int(i), n, f) for i, n, f in rows] == [
        (i, r["alert"], r["for"]) for i, r in enumerate(GROUPS[1]["rules"])
    ]


def test_every_metric_a_rule_or_panel_reads_is_exported() -> None:
    dashboard = json.loads((COMPONENT / "topoplace-dashboard.json").read_text())
    exprs = [r["expr"] for g in GROUPS for r in g["rules"]]
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    read = {m for e in exprs for m in re.findall(r"\btopoplace[_:][a-z0-9_:]+", e)}
    assert read - _series_names() - RECORDS == set()


def test_every_exported_metric_is_in_the_docs_table() -> None:
    documented = set(re.findall(r"^\| `(topoplace_\w+)` \|", DOCS, flags=re.M))
    exported = {
        name + {"counter": "_total", "info": "_info"}.get(kind, "")
        for name, kind in _families().items()
    }
    assert documented == exported


def test_thresholds_replace_for_and_the_final_bound_only() -> None:
    changed = prometheus.with_thresholds(
        GROUPS, {"TopoplaceNodeLabelsStale": {"for": "1m", "bound": 30}}
    )
    (rule,) = [r for r in changed[1]["rules"] if r.get("alert") == "TopoplaceNodeLabelsStale"]
    assert rule["for"] == "1m"
    assert rule["expr"].endswith("[1h])) > 30")
    with pytest.raises(ValueError, match="TopoplaceNoSuchAlert"):
        prometheus.with_thresholds(GROUPS, {"TopoplaceNoSuchAlert": {"for": "1m"}})


def _kustomize(tmp: Path, patches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not on PATH: the manifests are rendered only with `kubectl kustomize`")
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "components": [os.path.relpath(COMPONENT, tmp)],
        "patches": patches,
    }
    (tmp / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run(
        [kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone", str(tmp)],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(out) if d]


def _monitoring(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    kinds = ("PodMonitor", "PrometheusRule", "ConfigMap")
    return {
        (o["kind"], o["metadata"]["name"]): without_helm_labels(o)
        for o in objects
        if o["kind"] in kinds and o["metadata"]["name"].startswith("topoplace")
        and (o["kind"] != "ConfigMap" or o["metadata"]["name"] == "topoplace-dashboard")
    }  # fmt: skip


def test_the_chart_renders_the_component_and_its_thresholds_as_the_documented_patch(
    tmp_path: Path,
) -> None:
    stale = next(
        i for i, r in enumerate(GROUPS[1]["rules"]) if r.get("alert") == "TopoplaceNodeLabelsStale"
    )
    expr = GROUPS[1]["rules"][stale]["expr"].rstrip().removesuffix("600") + "900"
    ops = [
        {"op": "replace", "path": f"/spec/groups/1/rules/{stale}/for", "value": "10m"},
        {"op": "replace", "path": f"/spec/groups/1/rules/{stale}/expr", "value": expr},
    ]
    target = {"group": "monitoring.coreos.com", "kind": "PrometheusRule", "name": "topoplace"}
    kustomized = _monitoring(
        _kustomize(tmp_path, [{"target": target, "patch": yaml.safe_dump(ops)}])
    )
    rendered = helm()(
        "template", "topoplace", str(REPO / "charts" / "topoplace"), f"--namespace={NAMESPACE}",
        "--set=monitoring.enabled=true",
        "--set=monitoring.alerts.TopoplaceNodeLabelsStale.for=10m",
        "--set=monitoring.alerts.TopoplaceNodeLabelsStale.bound=900",
    )  # fmt: skip
    charted = _monitoring([d for d in yaml.safe_load_all(rendered) if d])
    assert len(kustomized) == 4
    assert charted == kustomized


def test_the_chart_renders_no_monitoring_by_default() -> None:
    rendered = helm()("template", "topoplace", str(REPO / "charts" / "topoplace"),
                      f"--namespace={NAMESPACE}")  # fmt: skip
    assert "monitoring.coreos.com" not in rendered
    assert "grafana_dashboard" not in rendered
