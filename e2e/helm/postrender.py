"""Helm post-renderer: the release's objects through kustomize components, as
`make cluster` applies the kustomize base through its e2e overlay.

    helm install ... --post-renderer PYTHON --post-renderer-args=-m \
        --post-renderer-args=e2e.helm.postrender --post-renderer-args=KUBECTL \
        --post-renderer-args=COMPONENT_DIR ...

Reads Helm's rendering on stdin and writes `kubectl kustomize` of it with the components
applied (e2e/overlays/local-webhook and beside-kubelet: what cannot run on this cluster).
Post-rendering is Helm's own way to apply kustomize over a chart; the chart stays as users
get it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: postrender KUBECTL COMPONENT_DIR...", file=sys.stderr)
        return 2
    kubectl, components = argv[0], [str(Path(c).resolve()) for c in argv[1:]]
    with tempfile.TemporaryDirectory(prefix="topoplace-postrender-") as tmp:
        root = Path(tmp)
        (root / "release.yaml").write_text(sys.stdin.read())
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": ["release.yaml"],
            # kustomize takes only relative paths for other kustomization roots.
            "components": [os.path.relpath(c, root) for c in components],
        }
        (root / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        done = subprocess.run(
            [kubectl, "kustomize", str(root)], capture_output=True, text=True, check=False
        )
    if done.returncode != 0:
        print(f"kubectl kustomize with {components}: {done.stderr}", file=sys.stderr)
        return done.returncode
    sys.stdout.write(done.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
