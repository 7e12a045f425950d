"""The node label vocabulary: every key the agent publishes, written once, imported everywhere.

The webhook builds node affinity from these names and the manifests' admission policy guards
these prefixes, so a key lives here and nowhere else as a literal.
"""

from __future__ import annotations

__all__ = [
    "DATASET_PREFIX",
    "LABEL_PREFIX",
    "LINK_WORDS",
    "NETWORK_TIERS",
    "POSITION_LEVELS",
    "TOPOLOGY_ANNOTATION",
    "ForeignLabel",
    "Label",
    "dataset_label",
    "gpu_device_labels",
    "is_owned_key",
]

# Everything under these prefixes belongs to the agent; nothing else on a Node does.
LABEL_PREFIX = "topoplace.io/"
DATASET_PREFIX = "dataset.topoplace.io/"

TOPOLOGY_ANNOTATION = LABEL_PREFIX + "topology"

# Best first, as `nvidia-smi topo -m` orders them.
LINK_WORDS: tuple[str, ...] = ("PIX", "PXB", "PHB", "NODE", "SYS")


class Label:
    """Node label keys (values are integers or link/policy words; never timestamps)."""

    CPU_SOCKETS = LABEL_PREFIX + "cpu-sockets"
    NUMA_NODES = LABEL_PREFIX + "numa-nodes"
    GPUS = LABEL_PREFIX + "gpus"
    GPU_NUMA_NODES = LABEL_PREFIX + "gpu-numa-nodes"
    MAX_GPUS_PER_NUMA_NODE = LABEL_PREFIX + "max-gpus-per-numa-node"
    MAX_CPUS_PER_NUMA_NODE = LABEL_PREFIX + "max-cpus-per-numa-node"
    MAX_MEMORY_GIB_PER_NUMA_NODE = LABEL_PREFIX + "max-memory-gib-per-numa-node"
    GPU_PCI_SWITCHES = LABEL_PREFIX + "gpu-pci-switches"
    MAX_GPUS_PER_PCI_SWITCH = LABEL_PREFIX + "max-gpus-per-pci-switch"
    RDMA_NICS = LABEL_PREFIX + "rdma-nics"
    GPU_NIC_PAIRS = LABEL_PREFIX + "gpu-nic-pairs"
    GPU_NIC_LINK = LABEL_PREFIX + "gpu-nic-link"
    # What the RDMA device-plugin resources hold: "compute" (only NICs that are a GPU's
    # partner) or "mixed" (storage/management NICs too); the kubelet picks any NIC of a NUMA
    # node, so only "compute" resources can give a pod whose GPUs fill NUMA nodes its pairs.
    RDMA_RESOURCE_NICS = LABEL_PREFIX + "rdma-resource-nics"
    GPU_PRODUCT = LABEL_PREFIX + "gpu-product"
    CPU_MANAGER_POLICY = LABEL_PREFIX + "cpu-manager-policy"
    TOPOLOGY_MANAGER_POLICY = LABEL_PREFIX + "topology-manager-policy"
    TOPOLOGY_MANAGER_SCOPE = LABEL_PREFIX + "topology-manager-scope"
    MEMORY_MANAGER_POLICY = LABEL_PREFIX + "memory-manager-policy"
    # topologyManagerPolicyOptions: "true"/"false" and an integer
    TOPOLOGY_MANAGER_PREFER_CLOSEST = LABEL_PREFIX + "topology-manager-prefer-closest-numa-nodes"
    TOPOLOGY_MANAGER_MAX_NUMA_NODES = LABEL_PREFIX + "topology-manager-max-allowable-numa-nodes"
    # The node's network position (docs/network-position.md): switch groups from the closest
    # outwards, each value unique fleet-wide; and the NVLink domain (`<ClusterUUID>.<CliqueID>`).
    NETWORK_TIER_1 = LABEL_PREFIX + "network-tier-1"
    NETWORK_TIER_2 = LABEL_PREFIX + "network-tier-2"
    NETWORK_TIER_3 = LABEL_PREFIX + "network-tier-3"
    NVLINK_DOMAIN = LABEL_PREFIX + "nvlink-domain"


# The position keys closest first; a policy's keepTogether level names one by its short word.
NETWORK_TIERS: tuple[str, ...] = (Label.NETWORK_TIER_1, Label.NETWORK_TIER_2, Label.NETWORK_TIER_3)
# keepTogether level word -> node label key, closest (smallest domain) first.
POSITION_LEVELS: dict[str, str] = {
    "nvlink-domain": Label.NVLINK_DOMAIN,
    **{key.removeprefix(LABEL_PREFIX): key for key in NETWORK_TIERS},
}


class ForeignLabel:
    """Keys other tools write that the agent reads for the node's position and never writes."""

    # AWS: layer 1 is the farthest network node, layer 3 the one above the instance.
    AWS_NETWORK_LAYERS = tuple(f"topology.k8s.aws/network-node-layer-{n}" for n in (1, 2, 3))
    GKE_BLOCK = "cloud.google.com/gce-topology-block"
    GKE_SUBBLOCK = "cloud.google.com/gce-topology-subblock"
    # topograph: tier 0 is the switch closest to the node.
    TOPOGRAPH_TIERS = tuple(f"fabric.topograph.run/tier-{n}" for n in (0, 1, 2))
    TOPOGRAPH_DOMAIN = "accelerator.topograph.run/domain"
    GFD_CLIQUE = "nvidia.com/gpu.clique"


def dataset_label(name: str) -> str:
    """Label key announcing the newest complete cached version of dataset `name`."""
    return DATASET_PREFIX + name


def gpu_device_labels(index: int) -> tuple[str, str, str]:
    """Per-GPU label keys (only with --per-device-labels): GPU `index`'s NUMA node, its paired
    RDMA NIC's name and its best link word to any RDMA NIC."""
    prefix = f"{LABEL_PREFIX}gpu-{index}-"
    return prefix + "numa-node", prefix + "nic", prefix + "nic-link"


def is_owned_key(key: str) -> bool:
    """True for label/annotation keys the agent owns (and may add, change or remove)."""
    return key.startswith((LABEL_PREFIX, DATASET_PREFIX))
