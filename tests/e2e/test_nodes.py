"""The simulated nodes are real kubelets: each registered its own Node and renews its Lease,
reports the machine its cAdvisor and device plugins see, and its policy labels are what that
kubelet itself says on /configz, drop-ins included. `add-node` and `remove-node` as the
contract says, bad input included."""

from __future__ import annotations

import json
from pathlib import Path

from common.vocabulary import Label
from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl, get_url
from e2e.nodes.start import node_procs
from tests.agent.discovery import machines
from tests.e2e.helpers import cluster_cli

POLICY_LABELS = {
    Label.CPU_MANAGER_POLICY: "cpuManagerPolicy",
    Label.TOPOLOGY_MANAGER_POLICY: "topologyManagerPolicy",
    Label.TOPOLOGY_MANAGER_SCOPE: "topologyManagerScope",
    Label.MEMORY_MANAGER_POLICY: "memoryManagerPolicy",
}
OPTION_LABELS = {
    Label.TOPOLOGY_MANAGER_PREFER_CLOSEST: "prefer-closest-numa-nodes",
    Label.TOPOLOGY_MANAGER_MAX_NUMA_NODES: "max-allowable-numa-nodes",
}
OPTION_DEFAULTS = {"prefer-closest-numa-nodes": "false", "max-allowable-numa-nodes": "8"}


def configz(cluster: Cluster, node: str) -> dict:
    """The kubelet's own view of its merged configuration (config file, then drop-ins)."""
    pki = Path(cluster.info["ca"]).parent
    port = cluster.nodes[node]["kubelet_port"]
    body = get_url(
        f"https://127.0.0.1:{port}/configz",
        cert=(pki / "admin.crt", pki / "admin.key"),
        verify=False,  # the kubelet's self-signed serving certificate
    )
    return json.loads(body)["kubeletconfig"]


def test_each_node_is_registered_by_its_own_kubelet_with_the_machines_capacity(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    leases = {
        lease["metadata"]["name"]: lease
        for lease in kubectl.json("get", "leases", "-n", "kube-node-lease")["items"]
    }
    for name, record in cluster.nodes.items():
        node = kubectl.json("get", "node", name)
        status = node["status"]
        assert status["nodeInfo"]["kubeletVersion"] == "v1.37.2", name
        ready = {c["type"]: c for c in status["conditions"]}["Ready"]
        assert (ready["status"], ready["reason"]) == ("True", "KubeletReady"), name
        assert not node["spec"].get("taints"), (name, node["spec"].get("taints"))
        assert leases[name]["spec"]["holderIdentity"] == name
        # The kubelet counted the machine's CPUs (cAdvisor, in its mount namespace) and
        # the device plugins' devices; the agent counted the same sysfs tree.
        labels = node["metadata"]["labels"]
        assert status["capacity"]["cpu"] == str(record["cpus"]), name
        assert status["capacity"].get("nvidia.com/gpu", "0") == labels.get(Label.GPUS, "0")
        assert status["capacity"].get("rdma/ib", "0") == labels.get(Label.RDMA_NICS, "0")
        reserved = configz(cluster, name).get("reservedSystemCPUs", "")
        n_reserved = len(reserved.split(",")) if reserved else 0
        assert status["allocatable"]["cpu"] == str(record["cpus"] - n_reserved), name


def test_policy_labels_equal_what_each_kubelet_reports_drop_ins_included(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    overridden = 0
    for name, record in cluster.nodes.items():
        live = configz(cluster, name)
        labels = kubectl.json("get", "node", name)["metadata"]["labels"]
        for label, field in POLICY_LABELS.items():
            assert labels.get(label) == live.get(field), (name, label, live.get(field))
        options = {**OPTION_DEFAULTS, **live.get("topologyManagerPolicyOptions", {})}
        for label, option in OPTION_LABELS.items():
            assert labels.get(label) == options[option], (name, label, options)
        dropins = list(Path(record["kubelet_config_dir"]).glob("*.conf"))
        overridden += bool(dropins)
    # At least one node's policy comes from a drop-in, not from its config file.
    assert overridden and labels_of(kubectl, "dgx-a100-nps4") == "single-numa-node"


def labels_of(kubectl: Kubectl, node: str) -> str:
    return kubectl.json("get", "node", node)["metadata"]["labels"][Label.TOPOLOGY_MANAGER_POLICY]


def test_nodes_command_prints_the_contract(cluster: Cluster) -> None:
    done = cluster_cli("nodes", "--output", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["nodes"]
    assert {r["name"] for r in rows} == set(cluster.nodes)
    for row in rows:
        assert Path(row["pod_resources_socket"]).is_socket(), row
        assert Path(row["kubelet_config"]).is_file() and Path(row["kubelet_config_dir"]).is_dir()
        assert (Path(row["sysfs"]) / "devices" / "system" / "cpu" / "online").is_file()


def test_add_node_refuses_a_tree_without_cpu_topology_and_leaves_nothing(
    cluster: Cluster, kubectl: Kubectl, tmp_path: Path
) -> None:
    sysfs = machines.build("workstation", tmp_path / "sys")
    online = sysfs / "devices" / "system" / "cpu" / "online"
    online.unlink()
    done = cluster_cli("add-node", "broken-node", "--sysfs", str(sysfs))
    assert done.returncode == 2
    assert str(online) in done.stderr and "nothing was started" in done.stderr
    assert kubectl.run("get", "node", "broken-node", check=False).returncode != 0
    assert not set(node_procs("broken-node")) & set(procs.running(cluster.state))
    assert not (cluster.state / "nodes" / "broken-node").exists()


def test_add_node_then_remove_node(cluster: Cluster, kubectl: Kubectl, tmp_path: Path) -> None:
    sysfs = machines.build("workstation", tmp_path / "sys")
    config = tmp_path / "kubelet.yaml"
    config.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n")
    done = cluster_cli(
        "add-node", "ws-added", "--sysfs", str(sysfs), "--kubelet-config", str(config)
    )
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        node = kubectl.json("get", "node", "ws-added")
        assert node["status"]["capacity"]["cpu"] == "32"  # 16 cores, 2 threads each
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "2"
        labels = node["metadata"]["labels"]
        assert labels[Label.CPU_MANAGER_POLICY] == "static"
        assert labels[Label.GPUS] == "2"
    finally:
        removed = cluster_cli("remove-node", "ws-added")
    assert removed.returncode == 0, removed.stderr
    assert kubectl.run("get", "node", "ws-added", check=False).returncode != 0
    running = procs.running(cluster.state)
    assert not set(node_procs("ws-added")) & set(running)


def test_a_kubelet_that_will_not_start_fails_add_node_with_its_log_and_leaves_nothing(
    cluster: Cluster, kubectl: Kubectl, tmp_path: Path
) -> None:
    sysfs = machines.build("workstation", tmp_path / "sys")
    config = tmp_path / "kubelet.yaml"
    config.write_text("cpuManagerPolicy: bogus\n")
    done = cluster_cli(
        "add-node", "bad-kubelet", "--sysfs", str(sysfs), "--kubelet-config", str(config)
    )
    assert done.returncode == 1
    assert "kubelet-bad-kubelet is not running" in done.stderr
    assert "bogus" in done.stderr  # the tail of the kubelet's own log says why
    assert kubectl.run("get", "node", "bad-kubelet", check=False).returncode != 0
    assert not set(node_procs("bad-kubelet")) & set(procs.running(cluster.state))
    assert not (cluster.state / "nodes" / "bad-kubelet").exists()
    listed = json.loads(cluster_cli("nodes", "--output", "json").stdout)["nodes"]
    assert "bad-kubelet" not in {n["name"] for n in listed}
