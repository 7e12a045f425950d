"""Kubelet source: the resource-manager policies from the kubelet's config file (YAML).

A readable file that leaves a field out means the kubelet's default, so the default is
reported: that is the policy the node really runs. No file, an unreadable one or one that is
not a KubeletConfiguration mapping: nothing is reported (logged once per call).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULTS", "KubeletConfig", "discover"]

log = logging.getLogger(__name__)

# KubeletConfiguration field -> the kubelet's default when the field is absent.
DEFAULTS: dict[str, str] = {
    "cpuManagerPolicy": "none",
    "topologyManagerPolicy": "none",
    "topologyManagerScope": "container",
    "memoryManagerPolicy": "None",
}


@dataclass(frozen=True, slots=True)
class KubeletConfig:
    cpu_manager_policy: str | None = None
    topology_manager_policy: str | None = None
    topology_manager_scope: str | None = None
    memory_manager_policy: str | None = None


def discover(config: Path | None) -> KubeletConfig:
    if config is None:
        return KubeletConfig()
    import yaml  # only when a config is given: keeps `--help` and config-less runs light

    try:
        text = config.read_text(encoding="utf-8")
        doc = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        log.warning("kubelet config %s not read, its policies are not labelled: %s", config, e)
        return KubeletConfig()
    if not isinstance(doc, dict):
        log.warning("kubelet config %s is not a YAML mapping, its policies are ignored", config)
        return KubeletConfig()
    values: dict[str, str | None] = {}
    for field, default in DEFAULTS.items():
        value = doc.get(field, default)
        if not isinstance(value, str):
            log.warning("kubelet config %s: %s is not a string: %r", config, field, value)
            value = None
        values[field] = value
    return KubeletConfig(
        cpu_manager_policy=values["cpuManagerPolicy"],
        topology_manager_policy=values["topologyManagerPolicy"],
        topology_manager_scope=values["topologyManagerScope"],
        memory_manager_policy=values["memoryManagerPolicy"],
    )
