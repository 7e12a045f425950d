"""The `resources` section of a PlacementPolicy: CPU, memory and RDMA for the containers."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

from pydantic import Field, model_validator

from webhook.policy.base import StrictModel as _Model
from webhook.policy.bounds import MAX_CPUS, MAX_DEVICES, MIN_CPUS
from webhook.policy.fields import ExtendedResource, Memory

__all__ = ["NumaNodeShare", "Rdma", "Resources", "WholeNumaNodes"]


# A count of devices, GPUs or NICs: a positive integer, at most MAX_DEVICES.
Devices = Annotated[int, Field(gt=0, le=MAX_DEVICES, strict=True)]


class WholeNumaNodes(_Model):
    """The NUMA node of the machines the policy is for, as the device-plugin path sees it."""

    gpus: Devices
    """GPUs on one NUMA node."""
    nics: Devices
    """NICs the RDMA resource holds on one NUMA node."""


class Rdma(_Model):
    """RDMA device-plugin resource requested per GPU."""

    resource: ExtendedResource
    """Extended resource name, e.g. rdma/ib or nvidia.com/hostdev."""
    per_gpu: Devices = 1
    """Devices per GPU (a positive integer, at most 1,024)."""
    whole_numa_nodes: WholeNumaNodes | None = None
    """Request `nics` NICs per `gpus` GPUs or part of them instead of perGpu: the pod then
    holds every NIC of the NUMA nodes its GPUs take, so each GPU's partner NIC too (the
    kubelet aligns NUMA nodes, not PCIe switches)."""

    def count(self, gpus: int) -> int:
        """NICs to request for `gpus` GPUs."""
        whole = self.whole_numa_nodes
        if whole is None:
            return gpus * self.per_gpu
        return -(-gpus // whole.gpus) * whole.nics


# CPUs: finite, from 1m to MAX_CPUS (webhook/policy/bounds.py).
Cpus = Annotated[Decimal, Field(ge=MIN_CPUS, le=MAX_CPUS, allow_inf_nan=False)]


def _no_bool(data: Any, key: str) -> Any:
    # Decimal's lax mode would read `cpuPerGpu: true` as 1.
    if isinstance(data, dict) and isinstance(data.get(key), bool):
        raise ValueError(f"{key} must be a number, not a boolean")
    return data


class NumaNodeShare(_Model):
    """CPUs and memory per NUMA node that a worker's GPUs take, on the machines the policy is
    for: a worker with N GPUs gets `cpu × ⌈N/gpus⌉` CPUs and `memory × ⌈N/gpus⌉`. Under the
    kubelet's `restricted` policy every aligned resource must need as many NUMA nodes as the
    others, so a worker whose GPUs span two NUMA nodes needs CPUs (and, with the Static memory
    manager, memory) that need two as well."""

    gpus: Devices
    """GPUs on one NUMA node."""
    cpu: Cpus | None = None
    """CPUs per NUMA node taken: more than half a NUMA node's, at most all of them."""
    memory: Memory | None = None
    """Memory per NUMA node taken (a Kubernetes quantity)."""

    @model_validator(mode="before")
    @classmethod
    def _no_bool_cpu(cls, data: Any) -> Any:
        return _no_bool(data, "cpu")

    @model_validator(mode="after")
    def _something(self) -> NumaNodeShare:
        if self.cpu is None and self.memory is None:
            raise ValueError("wholeNumaNodes needs cpu, memory or both")
        return self


class Resources(_Model):
    """CPU, memory and RDMA for the pod's containers."""

    guaranteed: bool = True
    """Make every container Guaranteed QoS (requests == limits) with integer CPUs for workers."""
    cpu_per_gpu: Cpus | None = None
    """CPUs per GPU for workers that set no CPU."""
    memory_per_gpu: Memory | None = None
    """Memory per GPU (a Kubernetes quantity, e.g. 96Gi) for workers that set no memory."""
    whole_numa_nodes: NumaNodeShare | None = None
    """CPUs and memory per NUMA node the worker's GPUs take, instead of per GPU."""
    rdma: Rdma | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_bool_cpu(cls, data: Any) -> Any:
        return _no_bool(data, "cpuPerGpu")

    @model_validator(mode="after")
    def _one_rule_each(self) -> Resources:
        share = self.whole_numa_nodes
        if share is None:
            return self
        for given, per_gpu, name in ((share.cpu, self.cpu_per_gpu, "cpu"),
                                     (share.memory, self.memory_per_gpu, "memory")):  # fmt: skip
            if given is not None and per_gpu is not None:
                raise ValueError(
                    f"wholeNumaNodes.{name} and {name}PerGpu both say how much {name} a "
                    "worker gets: keep one"
                )
        return self
