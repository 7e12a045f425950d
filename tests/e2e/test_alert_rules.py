"""The shipped PrometheusRule under the real promtool (built by `make e2e-bin`): `promtool check
rules` on the rule file as shipped, and `promtool test rules` with, for every alert, a failing
series it fires on and a healthy one it stays quiet on, at the shipped thresholds. Needs no
cluster; it runs in `make e2e` because promtool is built there (minutes, cold), not in
`make test`.

The unit tests read a copy without annotations: promtool compares an alert's annotations
too, and ours are templates of the labels already compared; `check rules` parses those.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.addons import prometheus

ALIGN = "topoplace_agent_gpu_container_alignment"
SYNC = "topoplace_agent_last_successful_sync_timestamp_seconds"
NRT = "topoplace_agent_nrt_last_current_timestamp_seconds"
ADMISSIONS = "topoplace_webhook_admission_requests_total"
REFUSALS = "topoplace_agent_kubelet_refusals_total"
EXPIRY = "topoplace_webhook_tls_certificate_expiry_timestamp_seconds"
BLOCKED = "topoplace_agent_dataset_cache_evictions_blocked_total"
_TRAINER = 'topoplace_agent_pod_memory_locality{node="n1",namespace="ml",pod="train-0"'
LOCAL, REMOTE, UNKNOWN = (f'{_TRAINER},verdict="{v}"}}' for v in ("local", "remote", "unknown"))
AGENT = 'node="n1",pod="topoplace-agent-x",namespace="topoplace-system"'


def _case(alert: str, series: dict[str, str], at: str, fired: list[dict[str, str]]) -> Any:
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series.items()],
        "alert_rule_test": [
            {
                "eval_time": at,
                "alertname": alert,
                "exp_alerts": [{"exp_labels": labels} for labels in fired],
            }
        ],
    }


def _fires(alert: str, series: dict[str, str], at: str, labels: dict[str, str]) -> Any:
    return _case(alert, series, at, [labels])


def _quiet(alert: str, series: dict[str, str], at: str) -> Any:
    return _case(alert, series, at, [])


WARN, CRIT = {"severity": "warning"}, {"severity": "critical"}
MISALIGNED = f'{ALIGN}{{node="n1",namespace="ml",pod="p",container="c",verdict="shared-cpus"}}'
CASES: dict[str, list[Any]] = {
    "TopoplaceGPUContainersMisaligned": [
        _fires(
            "TopoplaceGPUContainersMisaligned",
            {MISALIGNED: "1x30"},
            "20m",
            WARN | {"node": "n1", "namespace": "ml", "verdict": "shared-cpus"},
        ),
        _quiet("TopoplaceGPUContainersMisaligned", {MISALIGNED: "1x30"}, "10m"),  # not for 15m
        _quiet(
            "TopoplaceGPUContainersMisaligned",
            {MISALIGNED.replace("shared-cpus", "aligned"): "1x30"},
            "20m",
        ),
    ],
    "TopoplaceNodeLabelsStale": [
        # An agent that stopped at 10m: its series ends; the last value still ages.
        _fires(
            "TopoplaceNodeLabelsStale",
            {f"{SYNC}{{{AGENT}}}": "0+60x10"},
            "30m",
            WARN | {"node": "n1"},
        ),
        _fires(
            "TopoplaceNodeLabelsStale",
            {f"{SYNC}{{{AGENT}}}": "0+60x10 600x30"},
            "30m",
            WARN | {"node": "n1"},
        ),  # answering, never syncing
        _quiet("TopoplaceNodeLabelsStale", {f"{SYNC}{{{AGENT}}}": "0+60x40"}, "30m"),
    ],
    "TopoplaceNodeResourceTopologyStale": [
        _fires(
            "TopoplaceNodeResourceTopologyStale",
            {f"{NRT}{{{AGENT}}}": "0x40"},
            "30m",
            WARN | {"node": "n1"},
        ),  # never published
        _quiet("TopoplaceNodeResourceTopologyStale", {f"{NRT}{{{AGENT}}}": "0+60x40"}, "30m"),
    ],
    "TopoplacePodResourcesUnreadable": [
        _fires(
            "TopoplacePodResourcesUnreadable",
            {f"topoplace_agent_pod_resources_up{{{AGENT}}}": "0x40"},
            "30m",
            WARN | {"node": "n1"},
        ),
        _quiet(
            "TopoplacePodResourcesUnreadable",
            {f"topoplace_agent_pod_resources_up{{{AGENT}}}": "1x40"},
            "30m",
        ),
    ],
    "TopoplaceWebhookFailingOpen": [
        _fires(
            "TopoplaceWebhookFailingOpen",
            {f'{ADMISSIONS}{{outcome="failed_open",policy="ddp"}}': "0+5x30"},
            "20m",
            CRIT | {"policy": "ddp"},
        ),
        _quiet(
            "TopoplaceWebhookFailingOpen",
            {
                f'{ADMISSIONS}{{outcome="failed_open",policy="ddp"}}': "3x30",
                f'{ADMISSIONS}{{outcome="mutated",policy="ddp"}}': "0+50x30",
            },
            "20m",
        ),
    ],
    "TopoplaceWebhookCertificateExpiring": [
        # notAfter 6 days after t=0: under 7 days left throughout.
        _fires(
            "TopoplaceWebhookCertificateExpiring",
            {f'{EXPIRY}{{pod="w1"}}': "518400x200"},
            "2h",
            WARN | {"pod": "w1"},
        ),
        _quiet(
            "TopoplaceWebhookCertificateExpiring", {f'{EXPIRY}{{pod="w1"}}': "31536000x200"}, "2h"
        ),
    ],
    "TopoplaceKubeletRefusedPods": [
        # The counter appears with its first refusal at 10m (no earlier sample to compare).
        _fires(
            "TopoplaceKubeletRefusedPods",
            {
                f'{REFUSALS}{{{AGENT},reason="TopologyAffinityError"}}'.replace(
                    'namespace="topoplace-system"', 'namespace="ml"'
                ): "_x10 1x30"
            },
            "12m",
            WARN | {"node": "n1", "namespace": "ml", "reason": "TopologyAffinityError"},
        ),
        _quiet(
            "TopoplaceKubeletRefusedPods",
            {f'{REFUSALS}{{{AGENT},reason="TopologyAffinityError"}}': "_x10 1x30"},
            "30m",
        ),
        _quiet(
            "TopoplaceKubeletRefusedPods",
            {f'{REFUSALS}{{{AGENT},reason="OutOfcpu"}}': "3x40"},
            "30m",
        ),
    ],
    "TopoplaceDatasetCacheCannotEvict": [
        # A prefetch at 10m found the cache full with every other version leased.
        _fires(
            "TopoplaceDatasetCacheCannotEvict",
            {f"{BLOCKED}{{{AGENT}}}": "0x10 1x30"},
            "12m",
            WARN | {"node": "n1"},
        ),
        _quiet("TopoplaceDatasetCacheCannotEvict", {f"{BLOCKED}{{{AGENT}}}": "0x40"}, "30m"),
        # The last blocked one is over 30 minutes old: the cache has made room since.
        _quiet("TopoplaceDatasetCacheCannotEvict", {f"{BLOCKED}{{{AGENT}}}": "0x5 1x60"}, "50m"),
    ],
    "TopoplacePodMemoryRemote": [
        # The trainer's pages stay on the far socket from minute 5 on.
        _fires(
            "TopoplacePodMemoryRemote",
            {LOCAL: "1x4", REMOTE: "_x4 1x50"},
            "40m",
            WARN | {"node": "n1", "namespace": "ml", "pod": "train-0"},
        ),
        # Remote for 20 minutes, then local again (the pages migrated): no alert.
        _quiet("TopoplacePodMemoryRemote", {REMOTE: "1x20", LOCAL: "_x20 1x30"}, "45m"),
        # Unknown (cgroup unreadable) for an hour: never read as remote.
        _quiet("TopoplacePodMemoryRemote", {UNKNOWN: "1x60"}, "60m"),
    ],
}


@pytest.fixture(scope="module")
def promtool() -> Path:
    if not prometheus.wanted():
        pytest.skip(f"{prometheus.OPT_OUT}=0: promtool not built")
    tool = prometheus.prometheus_dir() / "promtool"
    if not tool.exists():
        pytest.fail(f"no {tool}: run `make e2e-bin`")
    return tool


def _run(promtool: Path, *args: str | Path) -> str:
    done = subprocess.run(
        [str(promtool), *map(str, args)], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_promtool_checks_the_shipped_rules(promtool: Path, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": prometheus.rule_groups()}))
    out = _run(promtool, "check", "rules", rules)
    assert "SUCCESS" in out


def test_every_alert_has_unit_tests() -> None:
    assert set(CASES) == set(prometheus.alert_names(prometheus.rule_groups()))


def test_each_alert_fires_on_its_failure_and_stays_quiet_when_healthy(
    promtool: Path, tmp_path: Path
) -> None:
    groups = prometheus.rule_groups()
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [case for cases in CASES.values() for case in cases],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    out = _run(promtool, "test", "rules", tmp_path / "tests.yaml")
    assert "SUCCESS" in out
