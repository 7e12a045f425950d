#!/usr/bin/env bash
# Build Kyverno's admission controller (cmd/kyverno) from the Go module proxy into a cache
# outside the repository, keyed by version, for `make bench-e2e`'s peer rows; reuse it
# when there. Never part of `make test`, `make e2e` or CI.
#
# `go install github.com/kyverno/kyverno/cmd/kyverno@VERSION` is refused: Kyverno's go.mod
# replaces k8s.io/pod-security-admission with its fork. The wrapper module e2e/go/kyverno
# requires Kyverno and repeats that one replace, as e2e/go/kubernetes does for Kubernetes.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
bin=$(e2e_kyverno_dir)
mkdir -p "$bin"
if [ -x "$bin/kyverno" ]; then
  echo "kyverno $KYVERNO_VERSION: cached in $bin"
  exit 0
fi
wanted=$(sed -n 's/^require github.com\/kyverno\/kyverno \(v[^ ]*\)$/\1/p' "$here/go/kyverno/go.mod")
if [ "$wanted" != "$KYVERNO_VERSION" ]; then
  echo "e2e/go/kyverno/go.mod requires kyverno $wanted, versions.sh says $KYVERNO_VERSION" >&2
  exit 1
fi
# The bench records why when there is no binary: keep this build's output beside it.
exec > >(tee "$bin/build.log") 2>&1
export CGO_ENABLED=0
export GOFLAGS=-mod=readonly
start=$(date +%s)
echo "kyverno $KYVERNO_VERSION: building (a cold build takes many minutes on 2 cores)"
ldflags="-s -w -X github.com/kyverno/kyverno/pkg/version.BuildVersion=$KYVERNO_VERSION"
(cd "$here/go/kyverno" &&
  go build -trimpath -ldflags "$ldflags" -o "$bin/kyverno.tmp" github.com/kyverno/kyverno/cmd/kyverno)
mv "$bin/kyverno.tmp" "$bin/kyverno"   # only a whole binary ever has the final name
echo "kyverno $KYVERNO_VERSION: built in $(( $(date +%s) - start ))s into $bin"
