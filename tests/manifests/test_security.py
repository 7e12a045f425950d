"""Every container of every rendering is locked down, and host access is read-only."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kube import parse_quantity
from tests.manifests.rendered import CHART_TARGETS, OVERLAYS, all_containers, render

# The kustomizations, and the Helm chart with each overlay's values (and every other value).
TARGETS = ["", *(f"overlays/{o}" for o in OVERLAYS), *CHART_TARGETS]
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# The single root step (agent DaemonSet): hands the dataset cache root to the prefetchers' user.
ROOT_STEP = ("topoplace-agent", "prepare-cache")
# The overlays that run a long-lived container as uid 0: the kubelet's PodResources socket is
# root-only, and both the placement audit and the NodeResourceTopology objects the NUMA-aware
# scheduler needs read it. Every other restriction still holds (checked below and on its own).
ROOT_AUDIT = ("placement-audit", "topoplace-agent", "agent")
ROOT_OVERLAYS = frozenset({"placement-audit", "numa-scheduler"})
# The one host path written outside the root step: the agent's dataset leases (pods on its
# node that mount a cached version), a directory holding nothing else.
LEASES = (
    "topoplace-agent",
    "agent",
    "dataset-leases",
    "/var/lib/topoplace/datasets/.topoplace-leases",
)


def overlay(target: str) -> str:
    """The overlay a target renders: "overlays/x" and "chart/x" both render x."""
    return target.rsplit("/", 1)[1] if "/" in target else ""


def workloads(target: str) -> list[tuple[str, dict[str, Any]]]:
    r = render(target)
    return [
        (o["metadata"]["name"], o["spec"]["template"]["spec"])
        for o in r.objects
        if o["kind"] in ("Deployment", "DaemonSet")
    ]


@pytest.mark.parametrize("target", TARGETS)
def test_every_container_is_non_root_read_only_and_unprivileged(target: str) -> None:
    for name, spec in workloads(target):
        pod_sc = spec.get("securityContext") or {}
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
        for c in all_containers(spec):
            where = f"{target or 'base'}: {name}/{c['name']}"
            sc = c["securityContext"]
            if (name, c["name"]) == ROOT_STEP:
                continue  # checked on its own below
            if overlay(target) in ROOT_OVERLAYS and (name, c["name"]) == ROOT_AUDIT[1:]:
                assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False, where
            else:
                assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, where
                assert sc.get("runAsUser", pod_sc.get("runAsUser", 0)) != 0, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc.get("privileged", False) is False, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile"))
            assert seccomp == {"type": "RuntimeDefault"}, where


@pytest.mark.parametrize("target", TARGETS)
def test_the_one_root_step_only_chowns_the_cache_and_exits(target: str) -> None:
    (spec,) = [s for n, s in workloads(target) if n == ROOT_STEP[0]]
    (step,) = [c for c in spec.get("initContainers") or [] if c["name"] == ROOT_STEP[1]]
    assert "restartPolicy" not in step  # a plain init container: runs to completion
    assert step["args"][0] == "prepare-cache"
    sc = step["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc.get("privileged", False) is False
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in step["volumeMounts"]}
    assert set(mounts) == {"datasets"}  # no /sys, no kubelet config, no token
    assert host["datasets"] == mounts["datasets"]["mountPath"]
    assert f"--cache-root={host['datasets']}" in step["args"]


@pytest.mark.parametrize("target", TARGETS)
def test_every_container_has_bounded_resources(target: str) -> None:
    for name, spec in workloads(target):
        for c in all_containers(spec):
            res = c["resources"]
            for key in ("cpu", "memory"):
                request = parse_quantity(res["requests"][key])
                limit = parse_quantity(res["limits"][key])
                assert 0 < request <= limit, f"{name}/{c['name']} {key}"


@pytest.mark.parametrize("target", TARGETS)
def test_host_paths_are_mounted_read_only(target: str) -> None:
    for name, spec in workloads(target):
        host_volumes = {v["name"] for v in spec.get("volumes") or [] if "hostPath" in v}
        for c in all_containers(spec):
            if (name, c["name"]) == ROOT_STEP:
                continue  # writes the cache root's ownership, nothing else
            for mount in c.get("volumeMounts") or []:
                if (name, c["name"], mount["name"], mount["mountPath"]) == LEASES:
                    continue
                if mount["name"] in host_volumes:
                    assert mount.get("readOnly") is True, f"{name}/{c['name']} {mount}"


@pytest.mark.parametrize("target", TARGETS)
def test_api_token_only_where_the_api_is_called(target: str) -> None:
    for name, spec in workloads(target):
        assert "automountServiceAccountToken" in spec, name
        if spec["automountServiceAccountToken"]:
            assert name == "topoplace-agent"  # it GETs and PATCHes its Node
            continue
        token_volumes = {
            v["name"]
            for v in spec.get("volumes") or []
            if any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))
        }
        holders = [
            c["name"]
            for c in all_containers(spec)
            for m in c.get("volumeMounts") or []
            if m["name"] in token_volumes
        ]
        if name == "topoplace-claim-templates":  # keeps DRA templates: list/watch/create/delete
            expected = ["claim-templates"]
        elif name == "topoplace-numa-scheduler":  # a kube-scheduler: watches, binds, its Lease
            expected = ["kube-scheduler"]
        else:
            # certs renews the serving certificate; serve's node cache lists and watches nodes
            expected = ["certs", "serve"] if overlay(target) != "cert-manager" else ["serve"]
        assert holders == expected, f"{name}: token mounted in {holders}"
        for c in all_containers(spec):
            if c["name"] in holders:
                (m,) = [m for m in c["volumeMounts"] if m["name"] in token_volumes]
                assert m["mountPath"] == TOKEN_DIR and m["readOnly"] is True
    for sa in render(target).all("ServiceAccount"):
        assert sa["automountServiceAccountToken"] is False  # pods opt in, one by one


@pytest.mark.parametrize("target", TARGETS)
def test_every_long_running_container_has_liveness_and_readiness_probes(target: str) -> None:
    for name, spec in workloads(target):
        for c in spec["containers"]:
            assert c["livenessProbe"]["httpGet"]["path"] == "/healthz", f"{name}/{c['name']}"
            assert c["readinessProbe"]["httpGet"]["path"] == "/readyz", f"{name}/{c['name']}"


def test_the_root_audit_overlay_changes_only_the_agents_user() -> None:
    base = render()
    audit = render(f"overlays/{ROOT_AUDIT[0]}")
    (agent,) = [c for n, spec in workloads(f"overlays/{ROOT_AUDIT[0]}") if n == ROOT_AUDIT[1]
                for c in spec["containers"] if c["name"] == ROOT_AUDIT[2]]  # fmt: skip
    sc = dict(agent["securityContext"])
    # Root, in the cache owner's group: the lease directory it shares is group-writable.
    assert sc.pop("runAsUser") == 0 and sc.pop("runAsGroup") == 65532
    sc["runAsNonRoot"] = True
    (base_agent,) = [c for n, spec in workloads("") if n == ROOT_AUDIT[1]
                     for c in spec["containers"] if c["name"] == ROOT_AUDIT[2]]  # fmt: skip
    assert sc == base_agent["securityContext"]  # no capability, no escalation, read-only root
    assert sc["capabilities"] == {"drop": ["ALL"]}
    others = [o for o in audit.objects if o["kind"] != "DaemonSet"]
    assert others == [o for o in base.objects if o["kind"] != "DaemonSet"]
