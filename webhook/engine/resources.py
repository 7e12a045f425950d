"""Container resources: Guaranteed QoS, per-GPU CPU and memory, integer worker CPUs, RDMA.

The kubelet grants exclusive cores (static CPU manager) and NUMA-aligned memory only to
Guaranteed pods with integer CPU requests, and a pod is Guaranteed only when EVERY container,
init and sidecar included, has cpu and memory requests equal to limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from webhook.engine.pod_fields import Container
from webhook.placement_model.requests import amount, container_gpus
from webhook.policy.model import PlacementPolicy, Rdma
from webhook.policy.quantity import ceil_int, format_cpu, format_memory, parse_quantity

__all__ = [
    "DEFAULT_CPU",
    "DEFAULT_MEMORY",
    "PREFETCH_CPU",
    "PREFETCH_MEMORY",
    "ResourcePlan",
    "apply_resources",
    "resource_plan",
]

# Containers that set nothing (log shippers, small sidecars) get this much, requests = limits:
# enough for a shell or an agent, small enough not to crowd the node.
DEFAULT_CPU = "100m"
DEFAULT_MEMORY = "256Mi"
# The injected prefetch init container: one core and room for download buffers.
PREFETCH_CPU = "1"
PREFETCH_MEMORY = "1Gi"
_DEFAULTS = {"cpu": DEFAULT_CPU, "memory": DEFAULT_MEMORY}


@dataclass(frozen=True, slots=True)
class ResourcePlan:
    """What the policy's `resources` section asks of one pod."""

    guaranteed: bool
    gpu_resource: str
    cpu_per_gpu: Decimal | None
    memory_per_gpu: Decimal | None
    rdma: Rdma | None  # the RDMA resource the workers request, and how many
    # resources.wholeNumaNodes: (GPUs per NUMA node, CPUs, memory bytes per NUMA node)
    per_numa_node: tuple[int, Decimal | None, Decimal | None] | None = None

    def amount_for(self, resource: str, gpus: int) -> Decimal | None:
        """What a worker with `gpus` GPUs gets of cpu or memory when it sets none."""
        if self.per_numa_node is not None:
            per, cpu, memory = self.per_numa_node
            share = cpu if resource == "cpu" else memory
            if share is not None:
                return share * -(-gpus // per)  # ⌈gpus / per⌉ NUMA nodes' worth
        per_gpu = self.cpu_per_gpu if resource == "cpu" else self.memory_per_gpu
        return per_gpu * gpus if per_gpu is not None else None


def apply_resources(
    container: Container,
    plan: ResourcePlan,
    *,
    worker: bool,
    warnings: list[str],
    gpus: int | None = None,
) -> None:
    """Edit one container's resources in place according to `plan`.

    `gpus` overrides the count read from the GPU extended resource: a DRA worker's GPUs come
    from its claim, and the extended resource is gone once the claim replaced it."""
    name = container.get("name", "?")
    resources = container.get("resources") or {}
    limits = dict(resources.get("limits") or {})
    requests = dict(resources.get("requests") or {})
    if gpus is None:
        gpus = container_gpus(container, plan.gpu_resource)
    gpus = gpus if worker else 0
    defaulted: list[str] = []

    for resource in ("cpu", "memory"):
        value = _settle(resource, limits, requests, name, warnings)
        if plan.guaranteed and value is not None and not _positive(value):
            value = None  # the kubelet ignores a zero amount: the container would not count
        total = plan.amount_for(resource, gpus) if value is None and gpus > 0 else None
        if total is not None:
            value = format_cpu(total) if resource == "cpu" else format_memory(total)
        elif not plan.guaranteed:
            continue  # only fill what is unset: a Burstable pod keeps the user's own numbers
        if value is None:
            value = _DEFAULTS[resource]
            defaulted.append(f"{resource} {value}")
        if resource == "cpu" and worker and plan.guaranteed:
            value = _integer_cpu(value, name, warnings)
        limits[resource] = value
        requests[resource] = value

    if defaulted:
        what = "worker container" if worker else "container"
        warnings.append(
            f"{what} {name}: sets no {' or '.join(d.split()[0] for d in defaulted)}; using "
            f"{', '.join(defaulted)} (requests = limits) for Guaranteed QoS"
        )
    _extended(limits, requests, plan.gpu_resource)
    if plan.rdma is not None and gpus > 0:
        rdma = plan.rdma.resource
        if rdma not in limits and rdma not in requests:
            limits[rdma] = str(plan.rdma.count(gpus))
        _extended(limits, requests, rdma)

    if limits != (resources.get("limits") or {}) or requests != (resources.get("requests") or {}):
        container["resources"] = {**resources, "limits": limits, "requests": requests}


def _settle(
    resource: str, limits: dict[str, Any], requests: dict[str, Any], name: str, warnings: list[str]
) -> Any:
    """The amount the user asked for: the limit when set (it caps), else the request."""
    limit, request = limits.get(resource), requests.get(resource)
    if limit is None:
        return request
    lim, req = amount(limit), amount(request)
    if lim is not None and req is not None and req > lim:
        warnings.append(
            f"container {name}: {resource} request {request} above limit {limit}; "
            f"lowered to the limit"
        )
        requests[resource] = limit
    return limit


def _positive(value: Any) -> bool:
    found = amount(value)
    return found is None or found > 0  # unparseable: leave it for the API server to reject


def _integer_cpu(value: Any, name: str, warnings: list[str]) -> Any:
    cores = amount(value)
    if cores is None or cores == cores.to_integral_value():
        return value
    rounded = ceil_int(cores)
    warnings.append(
        f"worker container {name}: cpu {value} rounded up to {rounded} "
        f"(exclusive cores need whole CPUs)"
    )
    return str(rounded)


def _extended(limits: dict[str, Any], requests: dict[str, Any], resource: str) -> None:
    """Extended resources cannot be overcommitted: the limit is required and equals the request."""
    if resource in limits:
        requests[resource] = limits[resource]
    elif resource in requests:
        limits[resource] = requests[resource]


# Resource plans by `<name>@<content hash>`: a plan depends on the policy content only.
_PLANS: dict[str, ResourcePlan] = {}
_PLANS_MAX = 4096


def resource_plan(policy: PlacementPolicy, key: str) -> ResourcePlan:
    """The policy's resource rules, parsed once per `<name>@<content hash>`."""
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()  # policy sets were replaced many times; start over
        plan = _PLANS[key] = _make_plan(policy)
    return plan


def _make_plan(policy: PlacementPolicy) -> ResourcePlan:
    resources = policy.spec.resources
    memory = resources.memory_per_gpu
    share = resources.whole_numa_nodes
    per_numa = None
    if share is not None:
        bytes_ = parse_quantity(share.memory) if share.memory is not None else None
        per_numa = (share.gpus, share.cpu, bytes_)
    return ResourcePlan(
        guaranteed=resources.guaranteed,
        gpu_resource=policy.spec.gpu_resource,
        cpu_per_gpu=resources.cpu_per_gpu,
        memory_per_gpu=parse_quantity(memory) if memory is not None else None,
        rdma=resources.rdma,
        per_numa_node=per_numa,
    )
