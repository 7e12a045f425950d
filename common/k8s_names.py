"""Kubernetes label key/value validity (apimachinery's rules), shared by agent and webhook.

A label the API server would reject must never be sent: one bad value fails the whole patch.
"""

from __future__ import annotations

import re

__all__ = [
    "DNS_SUBDOMAIN_PATTERN",
    "MAX_NAME",
    "MAX_OBJECT_NAME",
    "NAME_PATTERN",
    "is_dns_label",
    "is_dns_subdomain",
    "is_label_key",
    "is_label_name",
    "is_label_value",
    "label_key_problem",
    "label_value_problem",
    "object_name_problem",
    "sanitize_label_value",
]

MAX_NAME = 63
MAX_OBJECT_NAME = 253
_MAX_PREFIX = 253
# The patterns themselves, for a rule that composes them (a qualified resource name).
NAME_PATTERN = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_DNS_LABEL_PATTERN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN_PATTERN = rf"{_DNS_LABEL_PATTERN}(\.{_DNS_LABEL_PATTERN})*"
_NAME = re.compile(NAME_PATTERN)
_DNS_LABEL = re.compile(_DNS_LABEL_PATTERN)
_DNS_SUBDOMAIN = re.compile(DNS_SUBDOMAIN_PATTERN)
_INVALID_RUN = re.compile(r"[^-A-Za-z0-9_.]+")


def _name_problem(name: str, what: str) -> str | None:
    if not name:
        return f"{what} must not be empty"
    if len(name) > MAX_NAME:
        return f"{what} {name!r} is longer than {MAX_NAME} characters"
    if not _NAME.fullmatch(name):
        return (
            f"{what} {name!r} must consist of alphanumerics, '-', '_' or '.', "
            "and start and end with an alphanumeric"
        )
    return None


def label_key_problem(key: str) -> str | None:
    """None when `key` is a valid label key ([prefix/]name), else why not."""
    prefix, sep, name = key.rpartition("/")
    if sep:
        if not prefix:
            return f"label key {key!r} has an empty prefix"
        if len(prefix) > _MAX_PREFIX or not _DNS_SUBDOMAIN.fullmatch(prefix):
            return f"label key prefix {prefix!r} must be a lowercase DNS subdomain"
    return _name_problem(name, "label name")


def label_value_problem(value: str) -> str | None:
    """None when `value` is a valid label value (may be empty), else why not."""
    if value == "":
        return None
    return _name_problem(value, "label value")


# Alike in shape to `_name_problem` on purpose: apimachinery has two rules (a qualified name's
# name part, and an object's DNS subdomain) with their own bounds and wording.
def object_name_problem(name: str) -> str | None:
    """None when `name` is a valid name for most objects (a lowercase DNS subdomain, as
    apimachinery's NameIsDNSSubdomain checks), else why not."""
    if not name:
        return "a name must not be empty"
    if len(name) > MAX_OBJECT_NAME:
        return f"name {name[:20]!r}… is longer than {MAX_OBJECT_NAME} characters"
    if not _DNS_SUBDOMAIN.fullmatch(name):
        return (
            f"name {name!r} must consist of lowercase alphanumerics, '-' and '.', and start "
            "and end with an alphanumeric"
        )
    return None


def is_dns_label(value: str) -> bool:
    """A DNS label (RFC 1123) as apimachinery's IsDNS1123Label: container and namespace names."""
    return len(value) <= MAX_NAME and _DNS_LABEL.fullmatch(value) is not None


def is_dns_subdomain(value: str) -> bool:
    """A DNS subdomain (RFC 1123) as apimachinery's IsDNS1123Subdomain: most object names."""
    return len(value) <= MAX_OBJECT_NAME and _DNS_SUBDOMAIN.fullmatch(value) is not None


def is_label_key(key: str) -> bool:
    return label_key_problem(key) is None


def is_label_name(name: str) -> bool:
    return _name_problem(name, "label name") is None


def is_label_value(value: str) -> bool:
    return label_value_problem(value) is None


def sanitize_label_value(text: str) -> str:
    """Best-effort label value from free text ("NVIDIA H100 80GB HBM3" → "NVIDIA-H100-80GB-HBM3").

    Runs of invalid characters become '-', the result is cut to 63 characters and trimmed to
    start and end with an alphanumeric; may return "" when nothing usable remains.
    """
    value = _INVALID_RUN.sub("-", text.strip())[:MAX_NAME]
    return value.strip("-_.")
