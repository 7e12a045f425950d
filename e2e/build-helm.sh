#!/usr/bin/env bash
# Build Helm from the Go module proxy into a cache outside the repository, keyed by its
# version (e2e/versions.sh), and reuse what is there: a warm run does nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
bin=$(e2e_helm_dir)
if [ -x "$bin/helm" ]; then
  echo "[e2e-bin] helm $HELM_VERSION: cached in $bin"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "building helm needs Go on PATH (https://go.dev/doc/install)" >&2
  exit 1
fi
mkdir -p "$bin"
tmp=$(mktemp -d "$bin/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
echo "[e2e-bin] helm $HELM_VERSION: go install helm.sh/helm/v3/cmd/helm (a cold build takes minutes)"
# What Helm's own Makefile stamps: its version, and the Kubernetes version of its client-go
# (1.<minor> for client-go v0.<minor>), which `helm template` and `helm lint` assume for
# .Capabilities and a chart's kubeVersion (unstamped, 1.20).
dir=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" |
      sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
minor=$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$dir/go.mod")
[ -n "$minor" ] || { echo "no k8s.io/client-go in $dir/go.mod" >&2; exit 1; }
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
done
CGO_ENABLED=0 GOBIN="$tmp" go install -trimpath -ldflags "$ldflags" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
mv "$tmp/helm" "$bin/helm"   # only a whole binary ever has the final name
echo "[e2e-bin] helm $HELM_VERSION: built in $(( $(date +%s) - t0 ))s"
