"""Pod-side keys the webhook reads and writes, written once (manifests and docs refer here)."""

from __future__ import annotations

__all__ = ["APPLIED_ANNOTATION", "MIRROR_ANNOTATION", "POLICY_LABEL"]

# Pods opt in with this label; the MutatingWebhookConfiguration's objectSelector matches it.
POLICY_LABEL = "topoplace.io/policy"
# `<policy>@<hash>`: marks a pod as mutated so reinvocation yields an empty patch.
APPLIED_ANNOTATION = "topoplace.io/applied"
# Static (mirror) pods are created by the kubelet and must never be touched.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
