"""Kueue's CRDs as `make cluster` installs them: a conversion webhook only where Kueue's own
kustomization patches one in, since its certificate manager fills only those caBundles."""

from __future__ import annotations

from pathlib import Path

import yaml

from e2e.addons.kueue import NAMESPACE, SERVICE, _crds


def _crd(plural: str) -> dict[str, object]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kueue.x-k8s.io"},
        "spec": {"names": {"plural": plural}, "group": "kueue.x-k8s.io"},
    }


def _conversion() -> dict[str, object]:
    service = {"name": "webhook-service", "namespace": "system", "path": "/convert"}
    return {
        "spec": {
            "conversion": {
                "strategy": "Webhook",
                "webhook": {"clientConfig": {"service": service}},
            }
        }
    }


def test_only_the_conversion_patches_kueue_lists_are_applied(tmp_path: Path) -> None:
    crd = tmp_path / "crd"
    (crd / "bases").mkdir(parents=True)
    (crd / "patches").mkdir()
    for plural in ("workloads", "resourceflavors"):
        (crd / "bases" / f"{plural}.yaml").write_text(yaml.safe_dump(_crd(plural)))
        (crd / "patches" / f"webhook_in_{plural}.yaml").write_text(yaml.safe_dump(_conversion()))
    # As v0.17 ships it: the resourceflavors patch exists, commented out of the list.
    (crd / "kustomization.yaml").write_text(
        "patches:\n- path: patches/webhook_in_workloads.yaml\n"
        "#- path: patches/webhook_in_resourceflavors.yaml\n"
    )

    got = {c["metadata"]["name"]: c["spec"].get("conversion") for c in _crds(tmp_path, 4321)}

    assert got["resourceflavors.kueue.x-k8s.io"] is None
    service = got["workloads.kueue.x-k8s.io"]["webhook"]["clientConfig"]["service"]
    assert service == {"name": SERVICE, "namespace": NAMESPACE, "path": "/convert", "port": 4321}
