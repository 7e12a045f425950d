"""The PlacementPolicy file format (docs/policies.md), as strict pydantic v2 models.

Every field is checked at load time so the engine can trust a policy completely: label
keys/values the scheduler will see, quantities, env names and paths are all validated here.
YAML uses camelCase (`cpuPerGpu`); Python uses snake_case through an alias generator, and
validation errors report the YAML spelling.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from common.kubelet_contract import ALIGNING_POLICIES, TOPOLOGY_MANAGER_POLICIES
from common.vocabulary import POSITION_LEVELS
from webhook.policy.base import StrictModel as _Model
from webhook.policy.dra import Dra, template_name_problem
from webhook.policy.fields import (
    SOURCE_SCHEMES,
    ContainerName,
    EnvName,
    EnvValue,
    ExtendedResource,
    LabelKey,
    LabelName,
    LabelValue,
    LinkWord,
    MountPath,
    NamespaceGlob,
    NonEmptyLabelValue,
    SchedulerName,
    SecretName,
    SourceUrl,
)
from webhook.policy.resources import Rdma, Resources, WholeNumaNodes

__all__ = [
    "API_VERSION",
    "KIND",
    "NUMA_BINDINGS",
    "REFUSING_TOPOLOGY_POLICIES",
    "SOURCE_SCHEMES",
    "Dataset",
    "Dra",
    "KeepTogether",
    "Launcher",
    "Metadata",
    "Placement",
    "PlacementPolicy",
    "PolicySpec",
    "Rdma",
    "Resources",
    "WholeNumaNodes",
]

API_VERSION = "topoplace.io/v1alpha1"
KIND = "PlacementPolicy"
# torchrun --numa-binding choices (PyTorch >= 2.8).
NUMA_BINDINGS = ("node", "socket", "exclusive", "core-complex")
# The kubelet's policy names and which refuse what they cannot align: the kubelet contract's.
REFUSING_TOPOLOGY_POLICIES = ALIGNING_POLICIES


class Metadata(_Model):
    """Object metadata; `name` is what pods put in their `topoplace.io/policy` label."""

    name: NonEmptyLabelValue
    """Policy name: a valid label value (pods select it by label)."""
    labels: dict[LabelKey, LabelValue] = Field(default={})
    annotations: dict[str, str] = Field(default={})


class KeepTogether(_Model):
    """Keep a workload's pods within one domain of a network level (docs/policies.md)."""

    level: Literal[tuple(POSITION_LEVELS)]  # type: ignore[valid-type]
    """nvlink-domain, network-tier-1, network-tier-2 or network-tier-3 (the agent's labels)."""
    mode: Literal["required", "preferred"] = "required"
    """required: the pods wait rather than spread; preferred: spread only when they must."""
    slice_size: Annotated[int, Field(ge=1, strict=True)] | None = None
    """Under Kueue: keep each group of this many pods within the level (the whole workload
    is then only preferred to share one)."""

    @model_validator(mode="after")
    def _slices_are_required(self) -> KeepTogether:
        if self.slice_size is not None and self.mode != "required":
            raise ValueError("sliceSize needs mode: required (Kueue's slices are required)")
        return self

    @property
    def label_key(self) -> str:
        return POSITION_LEVELS[self.level]


class Placement(_Model):
    """Node requirements, turned into required node affinity on the agent's labels."""

    gpu_nic_link: LinkWord | None = None
    """Worst acceptable GPU↔RDMA NIC link, best first: PIX, PXB, PHB, NODE, SYS."""
    gpu_nic_pairs: bool = False
    """Require topoplace.io/gpu-nic-pairs >= the pod's GPU count."""
    single_numa_node: bool = False
    """Require topoplace.io/max-gpus-per-numa-node >= the pod's GPU count."""
    topology_manager_policies: (
        Annotated[list[Literal[TOPOLOGY_MANAGER_POLICIES]], Field(min_length=1)] | None  # type: ignore[valid-type]
    ) = None
    """Acceptable kubelet topologyManagerPolicy values."""
    required_labels: dict[LabelKey, LabelValue] = Field(default={})
    """Extra node label = value requirements."""
    numa_aware_scheduler: SchedulerName | None = None
    """Scheduler the pod's spec.schedulerName names, one that knows each NUMA node's free
    GPUs (Topoplace's own is topoplace-numa-scheduler)."""
    keep_together: KeepTogether | None = None
    """Keep a workload's pods within one NVLink domain or network block."""
    remote_access_weight: int = Field(default=0, ge=0, le=100)
    """Opt-in, 0 (off) to 100: the extender lowers a node's score by this share of the
    highest recent remote-access percent its NUMA zones publish (measured by the agents;
    reactive: the first jobs on a node teach it)."""

    @model_validator(mode="after")
    def _scheduler_needs_refusing_kubelets(self) -> Placement:
        # A NUMA-aware scheduler only matters on kubelets that refuse a misaligned pod; the
        # node affinity from topologyManagerPolicies is what keeps the pod on those.
        if self.numa_aware_scheduler is None:
            return self
        listed = self.topology_manager_policies or []
        if not listed or any(p not in REFUSING_TOPOLOGY_POLICIES for p in listed):
            raise ValueError(
                "numaAwareScheduler needs topologyManagerPolicies limited to "
                f"{' and/or '.join(REFUSING_TOPOLOGY_POLICIES)} (got "
                f"{listed or 'none'}): elsewhere the kubelet does not refuse a pod its NUMA "
                "node cannot hold"
            )
        return self


class Dataset(_Model):
    """A dataset cached on nodes under the webhook's cache root."""

    name: LabelName
    """Dataset name: a label name (it becomes dataset.topoplace.io/<name>)."""
    version: NonEmptyLabelValue
    """Version: a label value (the node label's value)."""
    source: SourceUrl
    """Where prefetch downloads from: s3://, gs://, http(s)://, file:///."""
    mount_path: MountPath
    """Where workers see the version directory (read-only)."""
    prefer_weight: Annotated[int, Field(ge=1, le=100, strict=True)] = 50
    """Preferred node affinity weight for nodes that hold this version."""
    prefetch: bool = True
    """Add the prefetch init container that downloads the version before workers start."""
    source_secret: SecretName | None = None
    """A Secret in the pod's namespace whose keys become the prefetch container's
    environment: endpoint and credentials (AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, …)."""

    @model_validator(mode="before")
    @classmethod
    def _version_as_text(cls, data: Any) -> Any:
        # `version: 2024` is an int in YAML; the label value is the same text.
        version = data.get("version") if isinstance(data, dict) else None
        if isinstance(version, int | float) and not isinstance(version, bool):
            return {**data, "version": str(version)}
        return data


class Launcher(_Model):
    """How the training launcher is adjusted."""

    numa_binding: Literal[NUMA_BINDINGS] | None = None  # type: ignore[valid-type]
    """torchrun --numa-binding mode: node, socket, exclusive or core-complex."""


class PolicySpec(_Model):
    """What the webhook does to a pod that names this policy."""

    namespaces: Annotated[list[NamespaceGlob], Field(min_length=1)] | None = None
    """Namespace globs allowed to use the policy; omit to allow every namespace."""
    gpu_resource: ExtendedResource = "nvidia.com/gpu"
    """Extended resource that counts GPUs."""
    workers: Annotated[list[ContainerName], Field(min_length=1)] | None = None
    """Worker container names; default: containers with a GPU limit."""
    placement: Placement = Placement()
    resources: Resources = Resources()
    datasets: list[Dataset] = Field(default=[])
    launcher: Launcher = Launcher()
    env: dict[EnvName, EnvValue] = Field(default={})
    """Environment added to workers; never overrides a variable the container sets."""
    dra: Dra | None = None
    """Allocate GPUs (and paired NICs) through DRA ResourceClaimTemplates."""
    on_missing: Literal["warn", "deny"] = "warn"
    """When the pod's namespace may not use this policy, or a DRA template is missing for
    the pod's GPU count: warn (admit, with a warning) or deny."""

    @field_validator("dra")
    @classmethod
    def _dra_needs_namespaces(cls, dra: Dra | None, info: Any) -> Dra | None:
        # Templates are created in every namespace the globs match: "everywhere" is not a
        # list. (An invalid namespaces list is absent from info.data and reported on its own.)
        if dra is not None and "namespaces" in info.data and info.data["namespaces"] is None:
            raise ValueError(
                "a DRA policy must list spec.namespaces (its claim templates are created "
                "in each namespace they match)"
            )
        return dra

    @field_validator("datasets")
    @classmethod
    def _unique_datasets(cls, datasets: list[Dataset]) -> list[Dataset]:
        for attr in ("name", "mount_path"):
            seen: set[str] = set()
            for dataset in datasets:
                value = getattr(dataset, attr)
                if value in seen:
                    raise ValueError(f"two datasets share {to_camel(attr)} {value!r}")
                seen.add(value)
        return datasets


class PlacementPolicy(_Model):
    """A Topoplace placement policy (one YAML document)."""

    model_config = ConfigDict(
        title="PlacementPolicy",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )

    api_version: Literal["topoplace.io/v1alpha1"]
    kind: Literal["PlacementPolicy"]
    metadata: Metadata
    spec: PolicySpec = PolicySpec()

    @field_validator("spec")
    @classmethod
    def _dra_template_names(cls, spec: PolicySpec, info: Any) -> PolicySpec:
        metadata = info.data.get("metadata")
        if spec.dra is not None and metadata is not None:
            problem = template_name_problem(metadata.name)
            if problem is not None:
                raise ValueError(problem)
        return spec

    @property
    def name(self) -> str:
        return self.metadata.name

    def allows_namespace(self, namespace: str) -> bool:
        globs = self.spec.namespaces
        return globs is None or _namespace_pattern(tuple(globs)).match(namespace) is not None


@functools.lru_cache(maxsize=1024)
def _namespace_pattern(globs: tuple[str, ...]) -> re.Pattern[str]:
    """One compiled alternation: the allowlist check is a single match per request.

    Cached here rather than held in a pydantic private attribute: reading one of those goes
    through BaseModel.__getattr__, which cost more than the match itself.
    """
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs))
