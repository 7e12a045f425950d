"""Kubelet source: the resource-manager policies the kubelet runs, from its config files.

The main file (`--config`) may be YAML or JSON (EKS writes JSON). The drop-in directory
(`--config-dir`) is merged over it as the kubelet merges it: every `*.conf` file below it
(subdirectories too), in lexical path order, each applied as a JSON merge patch (RFC 7386:
mappings merge key by key, `null` removes, anything else replaces), then the kubelet's
defaults fill what is still unset. So a field no file sets is reported with its default:
that is the policy the node really runs. An unreadable or malformed file means nothing is
reported (logged once per call): the kubelet itself would refuse to start with it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.kubelet_contract import CONFIG_DEFAULTS, DEFAULT_MAX_NUMA_NODES, OPTION_DEFAULTS

__all__ = [
    "DEFAULTS",
    "OPTION_DEFAULTS",
    "KubeletFiles",
    "discover",
    "dropin_files",
    "merge_patch",
]

log = logging.getLogger(__name__)

# The kubelet's defaults, from the one kubelet contract.
DEFAULTS = CONFIG_DEFAULTS
_DROPIN_SUFFIX = ".conf"
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}  # Go's strconv.ParseBool, as the kubelet
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


@dataclass(frozen=True, slots=True)
class KubeletFiles:
    """What the kubelet's config files say (strings as written, defaults filled); the
    placement model's reading of them is webhook/placement_model/kubelet.py's KubeletConfig."""

    cpu_manager_policy: str | None = None
    topology_manager_policy: str | None = None
    topology_manager_scope: str | None = None
    memory_manager_policy: str | None = None
    prefer_closest_numa_nodes: str | None = None  # "true" / "false"
    max_allowable_numa_nodes: str | None = None  # an integer >= 8


class _ConfigError(Exception):
    pass


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, what the kubelet applies for each drop-in."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def _load(path: Path) -> dict[str, Any]:
    """One config file or drop-in, within the bounds of a configuration file (size, nesting,
    aliases: common/yaml_input.py)."""
    from common.yaml_input import CONFIG, YamlInputError, check_depth, load_documents, read_text

    try:
        text = read_text(path, bounds=CONFIG)
    except OSError as e:
        raise _ConfigError(f"{path}: not readable: {e}") from None
    except YamlInputError as e:
        raise _ConfigError(str(e)) from None
    try:
        if text.lstrip().startswith("{"):
            # JSON first: PyYAML (YAML 1.1) misreads some valid JSON, such as tab indentation.
            doc = json.loads(text)
            check_depth(doc, source=str(path), bounds=CONFIG)
        else:
            docs = load_documents(text, source=str(path), bounds=CONFIG)
            if len(docs) > 1:
                raise _ConfigError(f"{path}: {len(docs)} YAML documents; the kubelet reads one")
            doc = docs[0] if docs else None
    except json.JSONDecodeError as e:
        raise _ConfigError(f"{path}: neither YAML nor JSON: {e}") from None
    except RecursionError:
        raise _ConfigError(f"{path}: JSON nested too deeply") from None
    except YamlInputError as e:
        raise _ConfigError(str(e)) from None
    if doc is None:
        return {}  # an empty drop-in changes nothing
    if not isinstance(doc, dict):
        raise _ConfigError(f"{path}: not a KubeletConfiguration mapping")
    if path.suffix == _DROPIN_SUFFIX and doc.get("kind") != "KubeletConfiguration":
        log.warning("kubelet drop-in %s names no kind KubeletConfiguration; the kubelet "
                    "refuses such a file, merged anyway", path)  # fmt: skip
    return doc


def dropin_files(config_dir: Path) -> list[Path]:
    """`*.conf` below `config_dir` in the kubelet's walk order (filepath.WalkDir: lexical)."""
    found: list[Path] = []

    def walk(directory: str) -> None:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as e:
            raise _ConfigError(f"kubelet drop-in directory {directory}: {e.strerror}") from None
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                walk(entry.path)
            elif entry.name.endswith(_DROPIN_SUFFIX):
                found.append(Path(entry.path))

    if not config_dir.is_dir():
        # A kubelet started with a --config-dir that does not exist would not run; here it
        # means this node's kubelet takes no drop-ins (the mount covers several layouts).
        log.info("no kubelet drop-in directory %s: no drop-ins merged", config_dir)
        return found
    walk(str(config_dir))
    return found


def _string(field: str, value: Any, where: str) -> str | None:
    if isinstance(value, str):
        return value
    log.warning("kubelet config %s: %s is not a string: %r", where, field, value)
    return None


def _options(doc: Mapping[str, Any], where: str) -> dict[str, str | None]:
    raw = doc.get("topologyManagerPolicyOptions") or {}
    if not isinstance(raw, dict):
        log.warning("kubelet config %s: topologyManagerPolicyOptions is not a mapping", where)
        return dict.fromkeys(OPTION_DEFAULTS)
    values: dict[str, str | None] = dict(OPTION_DEFAULTS)
    for name, value in raw.items():
        text = str(value).lower() if isinstance(value, bool) else str(value).strip()
        if name == "prefer-closest-numa-nodes":
            ok = text in _TRUE or text in _FALSE
            values[name] = ("true" if text in _TRUE else "false") if ok else None
        elif name == "max-allowable-numa-nodes":
            ok = text.lstrip("+").isdigit() and int(text) >= DEFAULT_MAX_NUMA_NODES
            values[name] = str(int(text)) if ok else None
        else:
            log.warning("kubelet config %s: unknown topology manager option %r", where, name)
            continue
        if not ok:
            log.warning("kubelet config %s: topologyManagerPolicyOptions %s=%r is not valid "
                        "(the kubelet refuses it)", where, name, value)  # fmt: skip
    return values


def discover(config: Path | None, config_dir: Path | None = None) -> KubeletFiles:
    if config is None and config_dir is None:
        return KubeletFiles()
    where = " + ".join(str(p) for p in (config, config_dir) if p is not None)
    try:
        doc: Any = _load(config) if config is not None else {}
        for dropin in dropin_files(config_dir) if config_dir is not None else ():
            doc = merge_patch(doc, _load(dropin))
    except _ConfigError as e:
        log.warning("kubelet config not read, its policies are not labelled: %s", e)
        return KubeletFiles()
    # A field set to null is unset: the kubelet's default applies, as for an absent one.
    values = {
        f: _string(f, d if doc.get(f) is None else doc[f], where) for f, d in DEFAULTS.items()
    }
    options = _options(doc, where)
    return KubeletFiles(
        cpu_manager_policy=values["cpuManagerPolicy"],
        topology_manager_policy=values["topologyManagerPolicy"],
        topology_manager_scope=values["topologyManagerScope"],
        memory_manager_policy=values["memoryManagerPolicy"],
        prefer_closest_numa_nodes=options["prefer-closest-numa-nodes"],
        max_allowable_numa_nodes=options["max-allowable-numa-nodes"],
    )
