"""How a simulated node's kubelet is configured and started: the e2e defaults under the
node's own fields, drop-ins beside the config, and a private mount namespace whose binds put
every host path the kubelet writes under the node's own directory."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from e2e.nodes import kubelet
from e2e.nodes.specs import NODES, memory_kib
from e2e.nodes.view import write_view
from tests.agent.discovery import machines


def test_node_fields_and_drop_ins_go_over_the_e2e_defaults(tmp_path: Path) -> None:
    a100 = next(n for n in NODES if n.name == "dgx-a100-nps4")
    doc = kubelet.config(
        ca=tmp_path / "ca.crt", cri_socket=tmp_path / "cri.sock", port=1, healthz_port=2,
        fields=a100.kubelet,
    )  # fmt: skip
    assert doc["cpuManagerPolicy"] == "static" and doc["topologyManagerPolicy"] == "restricted"
    assert doc["address"] == doc["healthzBindAddress"] == "127.0.0.1" and doc["readOnlyPort"] == 0
    assert doc["containerRuntimeEndpoint"] == f"unix://{tmp_path / 'cri.sock'}"
    paths = kubelet.KubeletPaths(tmp_path / "n2")
    kubelet.write_config(paths, doc, a100.dropins)
    assert json.loads(paths.config.read_text()) == doc
    (dropin,) = paths.config_dir.glob("*.conf")  # the kubelet reads *.conf only
    assert json.loads(dropin.read_text())["topologyManagerPolicy"] == "single-numa-node"
    assert paths.pod_resources_socket == tmp_path / "n2/var/lib/kubelet/pod-resources/kubelet.sock"


def test_the_kubelet_sees_its_machine_and_writes_only_below_its_node(tmp_path: Path) -> None:
    view = write_view(machines.build("vm", tmp_path / "sys"), 1024, tmp_path / "view")
    paths = kubelet.KubeletPaths(tmp_path / "n0")
    ready = tmp_path / "ready"
    holder = kubelet.namespace_command(paths, view, tmp_path / "datasets", ready=ready)
    assert holder[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    lines = holder[-1].splitlines()
    binds = {shlex.split(line)[-1]: shlex.split(line)[-2] for line in lines if "--bind" in line}
    assert binds == {
        "/var/lib": str(paths.var_lib),
        "/var/log": str(paths.var_log),
        "/var/lib/topoplace/datasets": str(tmp_path / "datasets"),
        "/sys/devices/system": str(view.system),
        "/proc/cpuinfo": str(view.cpuinfo),
        "/proc/meminfo": str(view.meminfo),
    }
    assert all(line.startswith("mount -n ") for line in lines if "--bind" in line)
    # Ready only once every bind is in place; then it holds the namespace.
    assert lines.index(f": > {ready}") > max(n for n, line in enumerate(lines) if "--bind" in line)
    assert lines[-1] == "exec sleep infinity"
    assert (paths.on_host(kubelet.DATASETS)).is_dir()  # the mount point, inside var/lib

    argv = kubelet.command(
        Path("/bin/kubelet"), 4242, node="cpu-vm", kubeconfig=tmp_path / "k",
        node_ip="127.0.1.5", labels={"a": "b"},
    )  # fmt: skip
    assert argv[:3] == ["nsenter", "--mount=/proc/4242/ns/mnt", "--"]  # the holder's namespace
    assert argv[3] == "/bin/kubelet" and "--root-dir=/var/lib/kubelet" in argv
    assert "--node-ip=127.0.1.5" in argv  # loopback: refused, so no address from the kubelet


@pytest.mark.parametrize("bad", ["64", "64G", "1.5Gi", "Gi", "-1Gi"])
def test_memory_must_be_a_binary_quantity(bad: str) -> None:
    with pytest.raises(ValueError, match=repr(bad)):
        memory_kib(bad)
    assert memory_kib("2Gi") == 2 * 1024**2
