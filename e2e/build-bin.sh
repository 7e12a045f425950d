#!/usr/bin/env bash
# Build the real control plane (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager, kubectl), the kubelet, and our e2e node runtime (CRI +
# device plugins, e2e/go/kubernetes/node) from the Go module proxy into a cache outside
# the repository, keyed by version (our runtime: by its source), and reuse what is there.
#
# Kubernetes and etcd cannot be `go install`ed: their go.mod files replace
# modules with directories that module zips leave out. The wrapper modules in
# e2e/go/ require the upstream module and pin every replaced one to its release.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
bin=$(e2e_bin_dir)
mkdir -p "$bin"

if ! command -v go >/dev/null 2>&1; then
  echo "make e2e-bin needs Go >= 1.26 on PATH (https://go.dev/doc/install)" >&2
  exit 1
fi
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if [ "${go_minor:-0}" -lt 26 ]; then
  echo "make e2e-bin needs Go >= 1.26, found $(go env GOVERSION)" >&2
  exit 1
fi

export CGO_ENABLED=0
export GOFLAGS=-mod=readonly
start=$(date +%s)
stamp() { printf '[e2e-bin %4ss] %s\n' "$(( $(date +%s) - start ))" "$*"; }

# What hack/lib/version.sh stamps, so that `--version` tells the truth.
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION"
  k8s_ldflags+=" -X $pkg.gitMajor=$(cut -d. -f1 <<<"${K8S_VERSION#v}")"
  k8s_ldflags+=" -X $pkg.gitMinor=$(cut -d. -f2 <<<"${K8S_VERSION#v}")"
  k8s_ldflags+=" -X $pkg.gitTreeState=clean"
  k8s_ldflags+=" -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

build() {  # build NAME MODULE_DIR PACKAGE LDFLAGS
  local name=$1 dir=$2 pkg=$3 ldflags=$4
  if [ -x "$bin/$name" ]; then
    stamp "$name: cached in $bin"
    return
  fi
  stamp "$name: building $pkg (a cold build takes minutes on 2 cores)"
  local t0; t0=$(date +%s)
  (cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg")
  mv "$bin/$name.tmp" "$bin/$name"   # only a whole binary ever has the final name
  stamp "$name: built in $(( $(date +%s) - t0 ))s"
}

build etcd "$here/go/etcd" . "-s -w"
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do
  build "$cmd" "$here/go/kubernetes" "k8s.io/kubernetes/cmd/$cmd" "$k8s_ldflags"
done
# Ours changes with the repository: key it by its source (e2e/nodes/start.py computes the same
# key to run its own checkout's build); the name e2e-node is a link to the latest build.
node_src=$(find "$here/go/kubernetes/node" -name '*.go' ! -name '*_test.go' | LC_ALL=C sort)
# shellcheck disable=SC2086
node_key=$(cat "$here/go/kubernetes/go.mod" $node_src | sha256sum | cut -c1-12)
if [ ! -x "$bin/e2e-node-$node_key" ]; then
  stamp "e2e-node: go test ./node (its own unit tests, before a new build is used)"
  (cd "$here/go/kubernetes" && go test ./node)
fi
build "e2e-node-$node_key" "$here/go/kubernetes" ./node "-s -w"
ln -sfn "e2e-node-$node_key" "$bin/e2e-node"
# The cert-manager overlay's CRDs, from the cert-manager Go module (its deploy/crds).
crds="$bin/../cert-manager-$CERT_MANAGER_VERSION-crds"
if [ ! -d "$crds" ]; then
  stamp "cert-manager $CERT_MANAGER_VERSION CRDs: downloading the Go module"
  dir=$(go mod download -json "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION" |
        sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir/deploy/crds" ] || { echo "no deploy/crds in cert-manager module at $dir" >&2; exit 1; }
  ln -sfn "$dir/deploy/crds" "$crds"
fi
# Kueue: its controller manager, and its module's config/ (CRDs, webhook manifests) beside it.
# On by default (the e2e Kueue scenarios need it); TOPOPLACE_E2E_KUEUE=0 skips it, and
# `make cluster` then starts no Kueue. Its cold build takes minutes; cached by version.
kueue=$(e2e_kueue_dir)
if [ "${TOPOPLACE_E2E_KUEUE:-1}" = 0 ]; then
  stamp "kueue: skipped (TOPOPLACE_E2E_KUEUE=0)"
elif [ -x "$kueue/bin/kueue" ]; then
  stamp "kueue $KUEUE_VERSION: cached in $kueue"
else
  stamp "kueue $KUEUE_VERSION: go install sigs.k8s.io/kueue/cmd/kueue (a cold build takes minutes)"
  mkdir -p "$kueue"
  t0=$(date +%s)
  rm -rf "$kueue/bin.tmp"
  GOBIN="$kueue/bin.tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  rm -rf "$kueue/bin" && mv "$kueue/bin.tmp" "$kueue/bin"
  stamp "kueue: built in $(( $(date +%s) - t0 ))s"
fi
if [ "${TOPOPLACE_E2E_KUEUE:-1}" != 0 ] && [ ! -d "$kueue/config" ]; then
  dir=$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" |
        sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir/config/components/crd/bases" ] || { echo "no CRDs in kueue module at $dir" >&2; exit 1; }
  ln -sfn "$dir/config" "$kueue/config"
fi
# JobSet's CRD, from the JobSet module Kueue's go.mod requires (no JobSet controller runs:
# Kueue's Workloads for JobSets are checked, their pods are never created).
if [ "${TOPOPLACE_E2E_KUEUE:-1}" != 0 ] && [ ! -d "$kueue/jobset-crds" ]; then
  jobset=$(sed -n 's/^[[:space:]]*sigs\.k8s\.io\/jobset \(v[^ ]*\)$/\1/p' "$kueue/config/../go.mod")
  dir=$(go mod download -json "sigs.k8s.io/jobset@$jobset" |
        sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir/config/components/crd/bases" ] || { echo "no CRDs in jobset module at $dir" >&2; exit 1; }
  ln -sfn "$dir/config/components/crd/bases" "$kueue/jobset-crds"
fi
stamp "all binaries in $bin"
