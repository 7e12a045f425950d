"""A real Prometheus on the local cluster, configured from what Topoplace ships for one:
its scrape jobs are the PodMonitors of manifests/components/monitoring/ as a Prometheus
Operator turns them into Kubernetes pod discovery (the real API server, our pods' IPs, the
monitors' relabelings and honorLabels), and its rules are the shipped PrometheusRule's with
the thresholds shortened (`E2E_THRESHOLDS`) so a scenario sees an alert fire within seconds.

Prometheus and promtool are built from the Go module proxy by `make e2e-bin` into a cache
keyed by version (e2e/versions.sh, e2e/build-prometheus.sh). Started by default;
TOPOPLACE_E2E_PROMETHEUS=0 leaves it out, and tests/e2e/test_monitoring.py then skips.
`python -m e2e.cluster prometheus-url` prints its URL.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from e2e import procs
from e2e.versions import cache_dir

__all__ = [
    "E2E_THRESHOLDS",
    "OPT_OUT",
    "alert_names",
    "panel_query",
    "prometheus_dir",
    "query",
    "rule_groups",
    "scrape_configs",
    "start",
    "wanted",
    "with_thresholds",
]

REPO = Path(__file__).resolve().parents[2]
COMPONENT = REPO / "manifests" / "components" / "monitoring"
OPT_OUT = "TOPOPLACE_E2E_PROMETHEUS"  # =0: no Prometheus
INTERVAL = "2s"  # scrape and rule evaluation: the scenarios wait on alerts, not minutes
# Shortened `for:` and bounds. The labels bound stays above the agents' resync interval (60 s
# in the DaemonSet), the age a healthy agent's sync timestamp reaches between reconciles.
E2E_THRESHOLDS: dict[str, dict[str, Any]] = {
    "TopoplaceGPUContainersMisaligned": {"for": "4s"},
    "TopoplaceNodeLabelsStale": {"for": "0s", "bound": 75},
    "TopoplaceNodeResourceTopologyStale": {"for": "0s", "bound": 120},
    "TopoplacePodResourcesUnreadable": {"for": "30s"},
    "TopoplaceWebhookFailingOpen": {"for": "0s"},
    "TopoplaceKubeletRefusedPods": {"for": "0s"},
    "TopoplaceDatasetCacheCannotEvict": {"for": "0s"},
}
# The bound an alert's expression ends with: a comparison with a number (prometheusrule.yaml).
_BOUND = re.compile(r"([<>]=?|[=!]=)\s*(-?[0-9][0-9.e+]*)\s*$")

Say = Callable[[str], None]


def wanted() -> bool:
    """Whether this cluster runs Prometheus: yes unless TOPOPLACE_E2E_PROMETHEUS=0."""
    return os.environ.get(OPT_OUT, "1") != "0"


def prometheus_dir() -> Path:
    """The cache directory holding the pinned prometheus and promtool binaries."""
    return cache_dir("e2e_prometheus_dir")


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((COMPONENT / name).read_text()) if d]


def rule_groups() -> list[dict[str, Any]]:
    """The shipped PrometheusRule's groups, as a Prometheus rule file holds them."""
    (rule,) = _docs("prometheusrule.yaml")
    return list(rule["spec"]["groups"])


def alert_names(groups: list[dict[str, Any]]) -> list[str]:
    return [r["alert"] for g in groups for r in g["rules"] if "alert" in r]


def with_thresholds(
    groups: list[dict[str, Any]], thresholds: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """`groups` with each named alert's `for:` and its expression's final bound replaced, as
    the chart's `monitoring.alerts` does (pure); an unknown alert name is an error."""
    unknown = set(thresholds) - set(alert_names(groups))
    if unknown:
        raise ValueError(f"no such alert in prometheusrule.yaml: {', '.join(sorted(unknown))}")
    out = []
    for group in groups:
        rules = []
        for rule in group["rules"]:
            rule = dict(rule)
            change = thresholds.get(rule.get("alert", ""), {})
            if "for" in change:
                rule["for"] = change["for"]
            if "bound" in change:
                expr = rule["expr"].rstrip()
                if not _BOUND.search(expr):
                    raise ValueError(f"{rule['alert']}: its expr does not end in a bound")
                bound = change["bound"]
                rule["expr"] = _BOUND.sub(lambda m, b=bound: f"{m[1]} {b}", expr)
            rules.append(rule)
        out.append({**group, "rules": rules})
    return out


def _relabeling(r: Mapping[str, Any]) -> dict[str, Any]:
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {names.get(k, k): v for k, v in r.items()}


def scrape_configs(kubeconfig: Path, interval: str = INTERVAL) -> list[dict[str, Any]]:
    """One Kubernetes pod-discovery job per PodMonitor endpoint, as the Prometheus Operator
    generates it: the monitor's pods and port, `namespace`/`pod`/`container` target labels,
    finished pods dropped, then the endpoint's own relabelings."""
    jobs = []
    for monitor in _docs("podmonitors.yaml"):
        meta, spec = monitor["metadata"], monitor["spec"]
        keep = [
            {
                "source_labels": [f"__meta_kubernetes_pod_label_{_label_name(key)}"],
                "regex": re.escape(value),
                "action": "keep",
            }
            for key, value in spec["selector"]["matchLabels"].items()
        ]
        for i, endpoint in enumerate(spec["podMetricsEndpoints"]):
            relabel = [
                *keep,
                {
                    "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                    "regex": re.escape(endpoint["port"]),
                    "action": "keep",
                },
                {
                    "source_labels": ["__meta_kubernetes_pod_phase"],
                    "regex": "(Failed|Succeeded)",
                    "action": "drop",
                },
                {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                {
                    "source_labels": ["__meta_kubernetes_pod_container_name"],
                    "target_label": "container",
                },
                {"target_label": "job", "replacement": f"{meta['namespace']}/{meta['name']}"},
                *(_relabeling(r) for r in endpoint.get("relabelings") or []),
            ]
            jobs.append(
                {
                    "job_name": f"podMonitor/{meta['namespace']}/{meta['name']}/{i}",
                    "scrape_interval": interval,
                    "scrape_timeout": interval,
                    "metrics_path": endpoint.get("path", "/metrics"),
                    "scheme": endpoint.get("scheme", "http"),
                    "honor_labels": bool(endpoint.get("honorLabels", False)),
                    "kubernetes_sd_configs": [
                        {
                            "role": "pod",
                            "kubeconfig_file": str(kubeconfig),
                            "namespaces": {"names": spec["namespaceSelector"]["matchNames"]},
                        }
                    ],
                    "relabel_configs": relabel,
                }
            )
    return jobs


def _label_name(key: str) -> str:
    """A pod label key as Kubernetes discovery names its meta label."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


def panel_query(expr: str) -> str:
    """A dashboard panel's query as Grafana sends it with every variable on All."""
    return re.sub(r"\$(node|namespace)\b", ".*", expr.replace("$__rate_interval", "1m"))


def query(url: str, promql: str, *, path: str = "/api/v1/query") -> Any:
    """One instant query (or another GET API path); the `data` of Prometheus's answer."""
    full = f"{url}{path}?{urllib.parse.urlencode({'query': promql})}" if promql else url + path
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only
    with opener.open(full, timeout=10) as resp:
        body = json.load(resp)
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus refused {promql!r}: {body.get('error')}")
    return body["data"]


def start(state: Path, kubeconfig: Path, say: Say) -> dict[str, Any]:
    """Write the config and rules, start Prometheus on 127.0.0.1, wait until it is ready."""
    home = state / "prometheus"
    home.mkdir(parents=True, exist_ok=True)
    rules = home / "rules.yaml"
    groups = with_thresholds(rule_groups(), E2E_THRESHOLDS)
    rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    config = {
        "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
        "rule_files": [str(rules)],
        "scrape_configs": scrape_configs(kubeconfig),
    }
    (home / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    port = procs.free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        str(prometheus_dir() / "prometheus"),
        f"--config.file={home / 'prometheus.yml'}",
        f"--storage.tsdb.path={home / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1d",
    ]
    # No proxy: Kubernetes discovery would otherwise send its API calls to one from the env.
    env = {k: "" for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
    procs.start(state, "prometheus", argv, env=env)
    procs.wait_for(
        lambda: query(url, "", path="/api/v1/status/runtimeinfo"),
        f"Prometheus ready on {url}",
        timeout=60,
        interval=0.5,
        watch=lambda: procs.check_alive(state, "prometheus"),
    )
    jobs = len(config["scrape_configs"])
    say(f"Prometheus on {url}: {jobs} scrape jobs from the PodMonitors, the shipped rules")
    return {"url": url, "rules": str(rules), "config": str(home / "prometheus.yml")}
