"""Find the pod templates inside a Kubernetes object, for the offline `mutate` command.

The webhook itself only ever sees Pods; offline, users hand us what they apply: a Pod, or a
workload whose pods will be created from a template. Each template is mutated as a pod.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from webhook.engine.patch import escape_token

__all__ = ["PodTemplate", "pod_templates", "pods_of", "replace_at"]

Path = tuple[str | int, ...]

# kind -> path of its single pod template
_SINGLE: dict[str, Path] = {
    "PodTemplate": ("template",),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
_GENERIC_DEPTH = 8


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """One pod (template) inside an object: where it is, and the dict itself (not a copy)."""

    path: Path
    pod: dict[str, Any]

    @property
    def pointer(self) -> str:
        """RFC 6901 pointer to the template ("" for a Pod itself)."""
        return "".join(f"/{escape_token(part)}" for part in self.path)

    @property
    def where(self) -> str:
        """Human path such as spec.replicatedJobs[0].template.spec.template ("" for a Pod)."""
        out = ""
        for part in self.path:
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
        return out


def pod_templates(obj: dict[str, Any]) -> list[PodTemplate]:
    """Every pod template in `obj`, in document order; [] when it holds none."""
    kind = obj.get("kind")
    if kind == "Pod":
        return [PodTemplate((), obj)]
    if kind in _SINGLE:
        found = _at(obj, _SINGLE[kind])
        return [PodTemplate(_SINGLE[kind], found)] if _is_template(found) else []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return []
    if kind == "JobSet":
        return list(_jobset(spec))
    if kind == "LeaderWorkerSet":
        lws = spec.get("leaderWorkerTemplate") or {}
        return [
            PodTemplate(("spec", "leaderWorkerTemplate", key), lws[key])
            for key in ("leaderTemplate", "workerTemplate")
            if _is_template(lws.get(key))
        ]
    replica_specs = [k for k in spec if k.endswith("ReplicaSpecs") and isinstance(spec[k], dict)]
    if replica_specs:  # Kubeflow training operator: PyTorchJob, TFJob, MPIJob, XGBoostJob, …
        return [
            PodTemplate(("spec", key, role, "template"), replica["template"])
            for key in replica_specs
            for role, replica in spec[key].items()
            if isinstance(replica, dict) and _is_template(replica.get("template"))
        ]
    # Anything else (TrainJob runtimes, other CRDs): whatever is shaped like a pod template.
    return list(_generic(spec, ("spec",), _GENERIC_DEPTH))


def pods_of(obj: dict[str, Any], template: PodTemplate) -> int:
    """How many pods a workload creates from `template` at once (the ones keepTogether keeps
    in one domain; for a LeaderWorkerSet, one group's)."""
    kind, path = obj.get("kind"), template.path
    if kind == "Job":
        return _count(_at(obj, ("spec", "parallelism")))
    if kind == "JobSet" and len(path) > 2:
        job = _at(obj, path[:3])
        replicas = _count(job.get("replicas") if isinstance(job, dict) else None)
        return replicas * _count(_at(job, ("template", "spec", "parallelism")))
    if kind == "LeaderWorkerSet":
        size = _count(_at(obj, ("spec", "leaderWorkerTemplate", "size")))
        leader = _at(obj, ("spec", "leaderWorkerTemplate", "leaderTemplate")) is not None
        if path[-1] == "leaderTemplate":
            return 1
        return max(1, size - 1) if leader else size
    if len(path) == 4 and str(path[1]).endswith("ReplicaSpecs"):
        return _count(_at(obj, (*path[:3], "replicas")))
    return 1


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def replace_at(obj: Any, path: Path, value: Any) -> Any:
    """A shallow-copied `obj` with the value at `path` replaced (the input is untouched)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    copy: list[Any] | dict[Any, Any]
    if isinstance(obj, list) and isinstance(head, int):
        copy = list(obj)
    elif isinstance(obj, dict):
        copy = dict(obj)
    else:
        raise KeyError(head)
    copy[head] = replace_at(obj[head], rest, value)  # type: ignore[index]
    return copy


def _jobset(spec: dict[str, Any]) -> Iterator[PodTemplate]:
    for index, job in enumerate(spec.get("replicatedJobs") or []):
        path: Path = ("spec", "replicatedJobs", index, "template", "spec", "template")
        found = _at(job, path[3:]) if isinstance(job, dict) else None
        if _is_template(found):
            yield PodTemplate(path, found)  # type: ignore[arg-type]


def _generic(value: Any, path: Path, depth: int) -> Iterator[PodTemplate]:
    if depth <= 0:
        return
    if isinstance(value, dict):
        if _is_template(value):
            yield PodTemplate(path, value)
            return
        for key, child in value.items():
            yield from _generic(child, (*path, key), depth - 1)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _generic(child, (*path, index), depth - 1)


def _at(obj: Any, path: Path) -> Any:
    for part in path:
        if isinstance(obj, dict) and isinstance(part, str):
            obj = obj.get(part)
        elif isinstance(obj, list) and isinstance(part, int) and 0 <= part < len(obj):
            obj = obj[part]
        else:
            return None
    return obj


def _is_template(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("spec"), dict)
        and isinstance(value["spec"].get("containers"), list)
    )
