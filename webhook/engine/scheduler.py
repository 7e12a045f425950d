"""spec.schedulerName for a policy with placement.numaAwareScheduler.

The API server defaults an absent schedulerName to `default-scheduler` before admission, so
that value (or none) is replaced. Any other name is the user's choice of scheduler (a gang
scheduler, a test scheduler): it is kept, with a warning, because the pod would otherwise be
handed to a scheduler its owner did not pick.
"""

from __future__ import annotations

from webhook.engine.pod_fields import PodSpec

__all__ = ["DEFAULT_SCHEDULER", "set_scheduler"]

DEFAULT_SCHEDULER = "default-scheduler"


def set_scheduler(spec: PodSpec, name: str | None, *, warnings: list[str]) -> None:
    """Point the pod at scheduler `name` unless it already names another non-default one."""
    if name is None:
        return
    current = spec.get("schedulerName")
    if current in (None, "", DEFAULT_SCHEDULER):
        spec["schedulerName"] = name
    elif current != name:
        warnings.append(
            f"spec.schedulerName {current!r} kept: the policy's NUMA-aware scheduler "
            f"{name!r} is not used, so the pod may land where no NUMA node has room"
        )
