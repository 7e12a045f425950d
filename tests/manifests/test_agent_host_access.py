"""The agent's host access in every rendering: /sys and the PodResources directory in the
base, the distribution's kubelet config in the kubelet overlays — read-only, and nothing
created on the host."""

from __future__ import annotations

import posixpath
from typing import Any

import pytest

from common.cache_layout import DEFAULT_CACHE_ROOT, LEASE_DIR
from tests.manifests.rendered import Rendering, render
from tests.manifests.test_consistency import agent_pod, container, mount_of, parse


@pytest.fixture(scope="module")
def base() -> Rendering:
    return render()


def test_agent_reads_the_hosts_sys_and_only_the_pod_resources_dir_read_only(
    base: Rendering,
) -> None:
    spec = agent_pod(base)
    agent = container(spec, "agent")
    args = parse("agent.cli.run", agent, {"NODE_NAME": "node-1"})
    mount, volume = mount_of(spec, agent, str(args.sysfs_root))
    assert mount["mountPath"] == str(args.sysfs_root) and mount["readOnly"] is True
    assert volume["hostPath"]["path"] == "/sys"
    mount, volume = mount_of(spec, agent, str(args.pod_resources_socket))
    assert mount["mountPath"] == str(args.pod_resources_socket.parent) and mount["readOnly"]
    assert volume["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    host = [v["hostPath"] for v in spec["volumes"] if "hostPath" in v]
    # Nothing else of /var/lib/kubelet (pod volumes, secrets), and nothing created on the host
    # but the dataset cache root and its lease directory: a kubelet mounts every volume before
    # the first init container runs, so prepare-cache cannot be the one to create that.
    assert [h["path"] for h in host if h["path"].startswith("/var/lib/kubelet")] == [
        "/var/lib/kubelet/pod-resources"
    ]
    assert [h["path"] for h in host if h.get("type", "").endswith("OrCreate")] == [
        str(DEFAULT_CACHE_ROOT),
        str(DEFAULT_CACHE_ROOT / LEASE_DIR),
    ]
    assert args.kubelet_config is None and args.kubelet_config_dir is None  # see the overlays


KUBELET_LAYOUTS = {
    "kubeadm": ("/var/lib/kubelet/config.yaml", None),
    "eks": ("/etc/kubernetes/kubelet/config.json", "/etc/kubernetes/kubelet/config.json.d"),
    "gke": ("/home/kubernetes/kubelet-config.yaml", None),
    "aks": ("/etc/default/kubeletconfig.json", None),
}


def _host_path(spec: dict[str, Any], c: dict[str, Any], path: str) -> tuple[str, dict]:
    """The host path `path` (inside container `c`) is, with its volume's hostPath."""
    mount, volume = mount_of(spec, c, path)
    assert mount["readOnly"] is True
    rest = posixpath.relpath(path, mount["mountPath"])
    host = volume["hostPath"]
    return posixpath.normpath(posixpath.join(host["path"], rest)), host


@pytest.mark.parametrize("distro", sorted(KUBELET_LAYOUTS))
def test_kubelet_overlays_read_the_distributions_files_and_create_nothing(distro: str) -> None:
    rendered = render(f"overlays/kubelet-{distro}")
    spec = agent_pod(rendered)
    agent = container(spec, "agent")
    args = parse("agent.cli.run", agent, {"NODE_NAME": "node-1"})
    config, config_dir = KUBELET_LAYOUTS[distro]
    path, host = _host_path(spec, agent, str(args.kubelet_config))
    assert path == config
    assert host["type"] in ("File", "Directory")  # never *OrCreate: no file left on the host
    if config_dir is None:
        assert args.kubelet_config_dir is None
    else:
        assert _host_path(spec, agent, str(args.kubelet_config_dir))[0] == config_dir
    # Only the kubelet config is added to the base.
    base_spec = agent_pod(render())
    assert len(spec["volumes"]) == len(base_spec["volumes"]) + 1
