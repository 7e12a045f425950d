"""The `spec.dra` block of a PlacementPolicy: DRA device classes, alignment and GPU counts.

A DRA policy pairs each GPU with an RDMA NIC through ResourceClaimTemplates that the
`claim-templates` command keeps in the policy's namespaces (webhook/claims/). The limits
below are the API server's, so a template built from a valid policy is never refused.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from common.k8s_names import is_dns_subdomain
from webhook.policy.cel import CEL_MAX_LENGTH, cel_syntax_problem
from webhook.policy.fields import name_rule

__all__ = [
    "ALIGN_ATTRIBUTES",
    "MAX_CONSTRAINTS",
    "MAX_REQUESTS",
    "Dra",
    "DraDevice",
    "template_name",
    "template_name_problem",
]

# Standard attributes that every DRA driver may publish (resource.kubernetes.io/…).
ALIGN_ATTRIBUTES: dict[str, str] = {
    "pcieRoot": "resource.kubernetes.io/pcieRoot",
    "numaNode": "resource.kubernetes.io/numaNode",
}
# resource.k8s.io/v1 DeviceRequestsMaxSize and DeviceConstraintsMaxSize.
MAX_REQUESTS = 32
MAX_CONSTRAINTS = 32


def template_name(policy: str, gpus: int) -> str:
    """The ResourceClaimTemplate a pod of `policy` with `gpus` GPUs references."""
    return f"topoplace-{policy}-{gpus}gpu"


def template_name_problem(policy: str) -> str | None:
    """None when the policy name makes valid template names, else why not."""
    name = template_name(policy, 99)
    if not is_dns_subdomain(name):
        return (
            f"metadata.name {policy!r} cannot name DRA templates ({template_name(policy, 1)} "
            "must be a DNS subdomain): use lowercase alphanumerics, '-' and '.'"
        )
    return None


_device_class_name = name_rule(
    is_dns_subdomain, "a DeviceClass name: a DNS subdomain such as gpu.nvidia.com"
)


def _cel(value: str) -> str:
    problem = cel_syntax_problem(value)
    if problem is not None:
        raise ValueError(f"not a CEL expression: {problem}")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, use_attribute_docstrings=True
    )


class DraDevice(_Model):
    """One device per request, from this DeviceClass, optionally narrowed by CEL."""

    device_class_name: Annotated[str, AfterValidator(_device_class_name)]
    """DeviceClass name, e.g. gpu.nvidia.com or dranet."""
    selector: (
        Annotated[str, AfterValidator(_cel), Field(max_length=CEL_MAX_LENGTH, min_length=1)] | None
    ) = None
    """CEL expression over `device` that each device must satisfy."""


class Dra(_Model):
    """Allocate the workers' GPUs (and one NIC per GPU) through DRA claims."""

    gpu: DraDevice
    """Where GPUs come from."""
    nic: DraDevice | None = None
    """Pair every GPU with one device of this class (an RDMA NIC); omit for GPUs only."""
    align: Literal["pcieRoot", "numaNode"] = "pcieRoot"
    """Standard attribute each GPU and its NIC must share: pcieRoot (same PCIe root complex)
    or numaNode."""
    gpu_counts: Annotated[
        list[Annotated[int, Field(gt=0, strict=True)]],
        Field(min_length=1, json_schema_extra={"uniqueItems": True}),
    ]
    """GPU counts that get a template; a pod asking for another count takes the
    device-plugin path with a warning."""

    @field_validator("gpu_counts")
    @classmethod
    def _counts(cls, counts: list[int], info: Any) -> list[int]:
        if len(set(counts)) != len(counts):
            raise ValueError(f"repeats a count: {counts}")
        per_gpu = 2 if info.data.get("nic") is not None else 1
        largest = MAX_REQUESTS // per_gpu
        too_big = [n for n in counts if n > largest]
        if too_big:
            raise ValueError(
                f"{too_big} above {largest}: a claim holds at most {MAX_REQUESTS} requests "
                f"({per_gpu} per GPU{' with nic' if per_gpu == 2 else ''})"
            )
        return counts

    @property
    def attribute(self) -> str:
        return ALIGN_ATTRIBUTES[self.align]
