"""A manifest's container as a local process: its command and args with `$(VAR)` expanded as
the kubelet expands them, and every path below a volume mount moved to where that volume
lives on this machine.

This is what keeps the local processes honest: they run the Deployment's and DaemonSet's own
arguments, so a flag the manifests get wrong fails here as it would in a pod. Only what a
kubelet would provide is supplied (volumes, the downward API, the service-account token as a
kubeconfig) plus loopback-only listen addresses, since every pod shares this one host's
network here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["LocalContainer", "container_of", "local_container", "pod_spec_of", "uses_api_token"]

_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@dataclass(frozen=True)
class LocalContainer:
    argv: list[str]
    env: dict[str, str]


def pod_spec_of(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for obj in objects:
        if obj.get("kind") == kind and obj["metadata"]["name"] == name:
            return obj["spec"]["template"]["spec"]
    raise LookupError(f"the rendered manifests hold no {kind} {name}")


def container_of(spec: dict[str, Any], name: str) -> dict[str, Any]:
    for c in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        if c["name"] == name:
            return c
    raise LookupError(f"no container {name!r} in the pod template")


TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


def uses_api_token(spec: dict[str, Any], name: str) -> bool:
    """Does the container get a service-account token (mounted, or automounted)?"""
    container = container_of(spec, name)
    if any(m["mountPath"].rstrip("/") == TOKEN_PATH for m in container.get("volumeMounts", [])):
        return True
    return spec.get("automountServiceAccountToken", True) is not False


def _env(container: dict[str, Any], fields: Mapping[str, str]) -> dict[str, str]:
    """Plain values and the downward-API fieldRefs the kubelet would resolve."""
    out: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            out[item["name"]] = _VAR.sub(lambda m: out.get(m.group(1), m.group(0)), item["value"])
        elif "fieldRef" in (item.get("valueFrom") or {}):
            path = item["valueFrom"]["fieldRef"]["fieldPath"]
            if path not in fields:
                raise LookupError(f"env {item['name']}: no value for fieldRef {path}")
            out[item["name"]] = fields[path]
        else:
            raise LookupError(f"env {item['name']}: only value and fieldRef are supported")
    return out


def _mounts(
    spec: dict[str, Any], container: dict[str, Any], volumes: Mapping[str, Path]
) -> list[tuple[str, Path]]:
    """(mountPath, local path) for every mount, longest mount path first."""
    declared = {v["name"] for v in spec.get("volumes", [])}
    out = []
    for mount in container.get("volumeMounts", []):
        name = mount["name"]
        if name not in declared:
            raise LookupError(f"mount {name!r} names no volume of the pod")
        if name not in volumes:
            continue  # e.g. the projected token: supplied as a kubeconfig instead
        local = volumes[name]
        if mount.get("subPath"):
            local = local / mount["subPath"]
        out.append((mount["mountPath"].rstrip("/"), local))
    return sorted(out, key=lambda m: len(m[0]), reverse=True)


def _relocate(value: str, mounts: list[tuple[str, Path]]) -> str:
    for mount_path, local in mounts:
        if value == mount_path or value.startswith(mount_path + "/"):
            return str(local) + value[len(mount_path) :]
    return value


def local_container(
    spec: dict[str, Any],
    name: str,
    *,
    volumes: Mapping[str, Path],
    fields: Mapping[str, str],
    executables: Mapping[str, str],
    extra_args: list[str] = (),  # type: ignore[assignment]
) -> LocalContainer:
    """`executables` maps the image's commands (topoplace-webhook…) to local programs."""
    container = container_of(spec, name)
    env = _env(container, fields)
    mounts = _mounts(spec, container, volumes)
    argv: list[str] = []
    for i, token in enumerate([*container.get("command", []), *container.get("args", [])]):
        token = _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), token)
        if i == 0:
            token = executables.get(token, token)
        elif token.startswith("--") and "=" in token:
            flag, value = token.split("=", 1)
            token = f"{flag}={_relocate(value, mounts)}"
        else:
            token = _relocate(token, mounts)
        argv.append(token)
    return LocalContainer(argv=[*argv, *extra_args], env=env)
