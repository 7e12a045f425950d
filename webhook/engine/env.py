"""Environment variables the policy adds to workers, never overriding the pod's own."""

from __future__ import annotations

from collections.abc import Mapping

from webhook.engine.pod_fields import Container

__all__ = ["add_env"]


def add_env(container: Container, env: Mapping[str, str], *, warnings: list[str]) -> None:
    """Append each policy variable the container does not already define in `env`."""
    if not env:
        return
    existing = container.get("env") or []
    have = {item.get("name") for item in existing}
    added = [{"name": k, "value": v} for k, v in env.items() if k not in have]
    if not added:
        return
    container["env"] = [*existing, *added]
    if container.get("envFrom"):
        # `env` wins over `envFrom`; we cannot see the ConfigMap's keys at admission.
        warnings.append(
            f"container {container.get('name', '?')}: policy env "
            f"{', '.join(a['name'] for a in added)} overrides same-named envFrom keys"
        )
