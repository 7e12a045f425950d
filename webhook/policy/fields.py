"""Validated scalar types for PlacementPolicy fields (label keys/values, quantities, paths…).

Each alias is an `Annotated[str, validator]` whose error message says what was expected; the
models in webhook/policy/model.py are built from them.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, Field

from common.k8s_names import (
    DNS_SUBDOMAIN_PATTERN,
    NAME_PATTERN,
    is_dns_label,
    is_dns_subdomain,
    label_key_problem,
    label_value_problem,
)
from common.vocabulary import LINK_WORDS
from webhook.policy.bounds import MAX_MEMORY, MIN_MEMORY_PER_GPU
from webhook.policy.quantity import QUANTITY_PATTERN, QuantityError, format_memory, parse_quantity

__all__ = [
    "SOURCE_SCHEMES",
    "ContainerName",
    "EnvName",
    "EnvValue",
    "ExtendedResource",
    "LabelKey",
    "LabelName",
    "LabelValue",
    "LinkWord",
    "Memory",
    "MountPath",
    "NamespaceGlob",
    "NonEmptyLabelValue",
    "SchedulerName",
    "SecretName",
    "SourceUrl",
    "name_rule",
]

SOURCE_SCHEMES = ("s3", "gs", "http", "https", "file")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Namespace names are DNS labels; a glob may add fnmatch's * ? [ ] !.
_NAMESPACE_GLOB = re.compile(r"[-a-z0-9*?\[\]!]+")
_QUALIFIED_RESOURCE = re.compile(rf"{DNS_SUBDOMAIN_PATTERN}/{NAME_PATTERN}")


def _raise_if(problem: str | None) -> None:
    if problem is not None:
        raise ValueError(problem)


def _label_value(value: str) -> str:
    _raise_if(label_value_problem(value))
    return value


def _nonempty_label_value(value: str) -> str:
    if not value:
        raise ValueError("must not be empty")
    return _label_value(value)


def _label_name(value: str) -> str:
    if "/" in value:
        raise ValueError(f"{value!r} must be a label name without '/'")
    _raise_if(label_key_problem(value))  # a key without prefix is checked as a bare name
    return value


def _label_key(value: str) -> str:
    _raise_if(label_key_problem(value))
    return value


def name_rule(fits: Callable[[str], bool], what: str) -> Callable[[str], str]:
    """A validator for one of Kubernetes' name rules: the value unchanged when it `fits`,
    else "'<value>' is not <what>"."""

    def check(value: str) -> str:
        if not fits(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return check


_container_name = name_rule(
    is_dns_label, "a container name: lowercase alphanumerics and '-', at most 63"
)
# A DNS subdomain, as the API server checks a Secret's name.
_secret_name = name_rule(
    is_dns_subdomain, "a Secret name: lowercase alphanumerics, '-' and '.', at most 253"
)


def _scheduler_name(value: str) -> str:
    # A profile name, and the name of the leader-election Lease the webhook looks for: a DNS
    # subdomain.
    if not is_dns_subdomain(value):
        raise ValueError(
            f"{value!r} is not a scheduler name: lowercase alphanumerics, '-' and '.', "
            "at most 253 (e.g. topoplace-numa-scheduler)"
        )
    if value == "default-scheduler":
        raise ValueError("'default-scheduler' is the NUMA-blind default: name another one")
    return value


def _namespace_glob(value: str) -> str:
    if not value or len(value) > 63 or not _NAMESPACE_GLOB.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a namespace glob: use lowercase alphanumerics, '-', and * ? [ ]"
        )
    return value


def _env_name(value: str) -> str:
    if not _ENV_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
    return value


def _env_value(value: Any) -> Any:
    # YAML turns `1` into an int; accept numbers, but not `yes`/`on` (YAML 1.1 booleans).
    if isinstance(value, bool):
        raise ValueError("a YAML boolean is ambiguous as an environment value: quote it")
    if isinstance(value, int | float):
        return str(value)
    return value


def _positive_quantity(value: Any) -> str:
    try:
        amount = parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    if amount <= 0:
        raise ValueError(f"must be a positive quantity, got {value!r}")
    return str(value)


def _memory(value: Any) -> str:
    amount = parse_quantity(_positive_quantity(value))
    low, high = format_memory(MIN_MEMORY_PER_GPU), format_memory(MAX_MEMORY)
    if not MIN_MEMORY_PER_GPU <= amount <= MAX_MEMORY:
        raise ValueError(f"must be from {low} to {high} (docs/policies.md, Bounds), got {value!r}")
    return str(value)


def _extended_resource(value: str) -> str:
    if len(value) > 253 or not _QUALIFIED_RESOURCE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an extended resource name such as nvidia.com/gpu or rdma/ib"
        )
    return value


def _mount_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must be an absolute path")
    if posixpath.normpath(value) == "/":
        raise ValueError("must not be '/': mounting a dataset over the root hides the image")
    if ".." in value.split("/"):
        raise ValueError(f"{value!r} must not contain '..'")
    return value


def _source_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in SOURCE_SCHEMES:
        raise ValueError(f"{value!r} must be a URL with scheme {', '.join(SOURCE_SCHEMES)}")
    if parts.scheme != "file" and not parts.netloc:
        raise ValueError(f"{value!r} names no bucket or host")
    if parts.scheme == "file" and not parts.path.startswith("/"):
        raise ValueError(f"{value!r} must be file:///absolute/path")
    return value


LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]
ContainerName = Annotated[str, AfterValidator(_container_name)]
NamespaceGlob = Annotated[str, AfterValidator(_namespace_glob)]
EnvName = Annotated[str, AfterValidator(_env_name)]
EnvValue = Annotated[str, BeforeValidator(_env_value)]
Memory = Annotated[
    str,
    BeforeValidator(_memory),
    # Same grammar as the validator, without the named groups JSON Schema lacks.
    Field(json_schema_extra={"pattern": re.sub(r"\?P<\w+>", "", QUANTITY_PATTERN)}),
]
"""A memory amount from 1Mi to 64Ti (webhook/policy/bounds.py)."""
LinkWord = Literal[LINK_WORDS]  # type: ignore[valid-type]
NonEmptyLabelValue = Annotated[str, AfterValidator(_nonempty_label_value)]
LabelName = Annotated[str, AfterValidator(_label_name)]
ExtendedResource = Annotated[str, AfterValidator(_extended_resource)]
MountPath = Annotated[str, AfterValidator(_mount_path)]
SourceUrl = Annotated[str, AfterValidator(_source_url)]
SecretName = Annotated[str, AfterValidator(_secret_name)]
SchedulerName = Annotated[str, AfterValidator(_scheduler_name)]
