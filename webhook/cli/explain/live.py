"""explain's live objects: `explain pod/NAME`, `explain job/NAME` (and the other workload kinds
the webhook mutates) read the object from the cluster, with its events.

Not a subcommand: a helper of webhook/cli/explain/command.py, which explains the object as it
is stored (the webhook already mutated it at CREATE; mutating again changes nothing) against
the nodes read_cluster.py reads, the object's own pod left out of what the nodes already hold.
The events are the scheduler's and the controllers' own word, printed after the table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["KINDS", "LiveObject", "live_ref", "read_live", "render_events"]

# kubectl's names for a kind (singular, plural, short) -> (group, version, plural).
KINDS: dict[str, tuple[str, str, str]] = {}
for _names, _where in (
    (("pod", "pods", "po"), ("", "v1", "pods")),
    (("job", "jobs"), ("batch", "v1", "jobs")),
    (("deployment", "deployments", "deploy"), ("apps", "v1", "deployments")),
    (("statefulset", "statefulsets", "sts"), ("apps", "v1", "statefulsets")),
    (("jobset", "jobsets"), ("jobset.x-k8s.io", "v1alpha2", "jobsets")),
    (("leaderworkerset", "lws"), ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")),
    (("pytorchjob", "pytorchjobs"), ("kubeflow.org", "v1", "pytorchjobs")),
    (("tfjob", "tfjobs"), ("kubeflow.org", "v1", "tfjobs")),
    (("mpijob", "mpijobs"), ("kubeflow.org", "v2beta1", "mpijobs")),
    (("xgboostjob", "xgboostjobs"), ("kubeflow.org", "v1", "xgboostjobs")),
    (("paddlejob", "paddlejobs"), ("kubeflow.org", "v1", "paddlejobs")),
    (("jaxjob", "jaxjobs"), ("kubeflow.org", "v1", "jaxjobs")),
):
    KINDS.update(dict.fromkeys(_names, _where))

_REF = re.compile(r"^([A-Za-z]+)(?:\.[a-z0-9.-]+)?/([a-z0-9]([-a-z0-9.]*[a-z0-9])?)$")
_EVENTS_SHOWN = 8


@dataclass(frozen=True, slots=True)
class LiveObject:
    doc: dict[str, Any]  # as submitted: no status, no bound node
    events: list[dict[str, Any]]
    now: str  # where it is now, e.g. "Pending, not bound to a node"
    uid: str | None  # a pod's: its own requests are not counted on its node


def live_ref(text: str) -> tuple[str, str] | None:
    """(kind, name) for `pod/NAME`-style text that is not a file here; None for a file."""
    match = _REF.match(text)
    if match is None or Path(text).exists():
        return None
    kind, name = match.group(1).lower(), match.group(2)
    if kind not in KINDS and name.endswith((".yaml", ".yml", ".json")):
        return None  # a file that is not there: reading it says so
    return kind, name


async def read_live(kubeconfig: Path | None, kind: str, name: str, namespace: str) -> LiveObject:
    """The object as stored, and its events, oldest first. ValueError for an unknown kind;
    ApiError from the API server (404: no such object)."""
    from kubernetes_asyncio import client

    from common.kube_config import load_configuration
    from webhook.kube_read import read_json

    if kind not in KINDS:
        known = ", ".join(sorted({names for names in KINDS if not names.endswith("s")}))
        raise ValueError(f"explain reads {known} from the cluster, not {kind!r}")
    group, version, plural = KINDS[kind]
    async with client.ApiClient(await load_configuration(kubeconfig)) as api:
        core = client.CoreV1Api(api)
        if group == "":
            call = core.read_namespaced_pod(name, namespace, _preload_content=False)
        else:
            call = client.CustomObjectsApi(api).get_namespaced_custom_object(
                group, version, namespace, plural, name, _preload_content=False
            )
        doc = await read_json(await call)
        kind_name = doc.get("kind") or ""
        listed = await read_json(
            await core.list_namespaced_event(
                namespace,
                field_selector=f"involvedObject.name={name},involvedObject.kind={kind_name}",
                _preload_content=False,
            )
        )
    events = sorted(listed.get("items") or [], key=_when)
    uid = (doc.get("metadata") or {}).get("uid") if kind_name == "Pod" else None
    return LiveObject(_as_submitted(doc), events, _now(doc), uid)


def _now(doc: dict[str, Any]) -> str:
    found = doc.get("status")
    status: dict[str, Any] = found if isinstance(found, dict) else {}
    if doc.get("kind") != "Pod":
        active = status.get("active")
        return f"{active} pod(s) active" if active else "no pods active"
    node = (doc.get("spec") or {}).get("nodeName")
    phase = status.get("phase") or "Pending"
    return f"{phase} on node {node}" if node else f"{phase}, not bound to a node"


def _when(event: dict[str, Any]) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or "")


def _as_submitted(doc: dict[str, Any]) -> dict[str, Any]:
    """The object without what the cluster added after admission (status, the bound node):
    explain asks where it could go, not where it went."""
    found = doc.get("spec")
    spec: dict[str, Any] = found if isinstance(found, dict) else {}
    if doc.get("kind") == "Pod":
        spec = {k: v for k, v in spec.items() if k != "nodeName"}
    return {k: v for k, v in {**doc, "spec": spec}.items() if k != "status"}


def render_events(live: LiveObject, label: str) -> str:
    """Where the object is now and its last events, as `kubectl describe` lists them."""
    lines = [f"now: {label} is {live.now}"]
    if not live.events:
        lines.append(f"no events for {label} (events expire after an hour)")
    else:
        lines.append(f"events of {label} (the scheduler's and controllers' own word):")
        for event in live.events[-_EVENTS_SHOWN:]:
            count = event.get("count") or 1
            times = f" (×{count})" if count > 1 else ""
            message = " ".join(str(event.get("message") or "").split())
            lines.append(f"  {event.get('type', '')}  {event.get('reason', '')}{times}: {message}")
    return "\n".join(lines) + "\n"
