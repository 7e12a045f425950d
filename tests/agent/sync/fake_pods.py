"""Pods for the fake API server: `GET /api/v1/pods` as list and as watch, as kube-apiserver
answers them for `fieldSelector=spec.nodeName=<node>`.

A list returns a `PodList` whose `metadata.resourceVersion` a watch can resume from; a watch
(`watch=true`) streams one JSON event per line (ADDED / MODIFIED / DELETED), first the
history after the given resourceVersion, then live changes, until `timeoutSeconds`, the
server stopping, `expire_watches()` (410 Gone, as after an etcd compaction) or
`drop_watches()` (the connection cut mid-stream). `bookmark()` sends watches that asked for
bookmarks (`allowWatchBookmarks`) a BOOKMARK at a newer resourceVersion, as kube-apiserver does
while other resources change.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = ["PodStore", "pod"]


def pod(
    name: str,
    *,
    uid: str,
    node: str,
    volumes: list[dict[str, Any]] | None = None,
    mounts: list[dict[str, Any]] | None = None,
    namespace: str = "ml",
    phase: str = "Running",
) -> dict[str, Any]:
    """A Pod object as the API server stores it (the fields the agent reads, and required ones)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "trainer", "image": "trainer:1", "volumeMounts": mounts or []}],
            "volumes": volumes or [],
        },
        "status": {"phase": phase},
    }


_GONE = {
    "apiVersion": "v1",
    "kind": "Status",
    "metadata": {},
    "status": "Failure",
    "code": 410,
    "reason": "Expired",
    "message": "too old resource version",
}


def _field(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _selected(obj: dict[str, Any], fields: str, labels: str = "") -> bool:
    """kube-apiserver's selector semantics for what the clients here send: field terms
    `path=value` / `path!=value` (an absent field is ""), label terms `key`, `!key`,
    `key=value`, `key!=value`."""
    for term in filter(None, fields.split(",")):
        negated = "!=" in term
        path, _, value = term.partition("!=" if negated else "=")
        if (_field(obj, path) == value) == negated:
            return False
    have = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, labels.split(",")):
        if term.startswith("!"):
            if term[1:] in have:
                return False
        elif "!=" in term:
            key, _, value = term.partition("!=")
            if have.get(key) == value:
                return False
        elif "=" in term:
            key, _, value = term.partition("=")
            if have.get(key) != value.lstrip("="):
                return False
        elif term not in have:
            return False
    return True


@dataclass
class PodStore:
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # uid -> pod
    history: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    rv: int = 1000
    lists: int = 0  # list requests answered, to wait on relists
    watches: list[dict[str, str]] = field(default_factory=list)  # each watch request's query
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _expired: int = 0  # watches from a resourceVersion at or below this get 410
    _drops: int = 0  # drop_watches() calls: a watch that saw fewer cuts its connection

    def _record(self, kind: str, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, kind, copy.deepcopy(obj)))
        self._changed.set()
        self._changed = asyncio.Event()

    def add(self, obj: dict[str, Any]) -> None:
        self.pods[obj["metadata"]["uid"]] = obj
        self._record("ADDED", obj)

    def set_phase(self, uid: str, phase: str) -> None:
        self.pods[uid]["status"]["phase"] = phase
        self._record("MODIFIED", self.pods[uid])

    def delete(self, uid: str) -> None:
        self._record("DELETED", self.pods.pop(uid))

    def delete_quietly(self, uid: str) -> None:
        """Gone with no event anyone could see (deleted while the agent was down)."""
        self.pods.pop(uid)
        self.rv += 1

    def expire_watches(self) -> None:
        self._expired = self.rv
        self._wake()

    def drop_watches(self) -> None:
        """Cut every open watch's connection mid-stream (no end of the chunked body)."""
        self._drops += 1
        self._wake()

    def bookmark(self) -> None:
        """Another resource changed: the version moves on, and watches hear a BOOKMARK."""
        self.rv += 1
        self.history.append((self.rv, "BOOKMARK", {"metadata": {"resourceVersion": str(self.rv)}}))
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        fields = request.query.get("fieldSelector", "")
        labels = request.query.get("labelSelector", "")
        if request.query.get("watch") not in ("true", "1", "True"):
            self.lists += 1
            items = [p for p in self.pods.values() if _selected(p, fields, labels)]
            return web.json_response(
                {
                    "apiVersion": "v1",
                    "kind": "PodList",
                    "metadata": {"resourceVersion": str(self.rv)},
                    "items": items,
                }
            )
        self.watches.append(dict(request.query))
        since = int(request.query.get("resourceVersion") or self.rv)
        timeout = float(request.query.get("timeoutSeconds") or 60)
        bookmarks = request.query.get("allowWatchBookmarks") in ("true", "1", "True")
        drops = self._drops
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        sent = since
        while loop.time() < deadline:
            if since <= self._expired:
                await resp.write(json.dumps({"type": "ERROR", "object": _GONE}).encode() + b"\n")
                break
            if drops != self._drops and request.transport is not None:
                request.transport.abort()
                return resp
            # As the watch cache does: an object entering the selection is ADDED, one leaving
            # it DELETED, whatever the change that moved it.
            matched: dict[str, bool] = {}
            for rv, kind, obj in self.history:
                if kind == "BOOKMARK":
                    seen = bookmarks
                else:
                    uid = obj["metadata"].get("uid", "")
                    was, now = matched.get(uid, False), _selected(obj, fields, labels)
                    matched[uid] = now and kind != "DELETED"
                    if was and not now:
                        kind = "DELETED"
                    elif now and not was:
                        kind = "ADDED" if kind != "DELETED" else kind
                    seen = was or now
                if rv > sent and seen:
                    await resp.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                sent = max(sent, rv)
            changed = self._changed
            while not changed.is_set() and loop.time() < deadline:
                if request.transport is None or request.transport.is_closing():
                    return resp  # the client went away: end the handler, not at the timeout
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), timeout=0.1)
        with contextlib.suppress(ConnectionError):
            await resp.write_eof()
        return resp
