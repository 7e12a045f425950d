#!/usr/bin/env bash
# Build Prometheus and promtool from the Go module proxy into a cache outside the repository,
# keyed by version (e2e/versions.sh); a warm run does nothing. Only the two binaries, with
# every service-discovery plugin left out but Kubernetes' (the e2e Prometheus finds our pods
# through the real API server, as a PodMonitor's scrape config does), one package at a time
# so a 2-core machine stays usable. TOPOPLACE_E2E_PROMETHEUS=0: nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
if [ "${TOPOPLACE_E2E_PROMETHEUS:-1}" = 0 ]; then
  echo "[e2e-bin] prometheus: left out (TOPOPLACE_E2E_PROMETHEUS=0)"
  exit 0
fi
bin=$(e2e_prometheus_dir)
if [ -x "$bin/prometheus" ] && [ -x "$bin/promtool" ]; then
  echo "[e2e-bin] prometheus $PROMETHEUS_VERSION: cached in $bin"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "building prometheus needs Go on PATH (https://go.dev/doc/install)" >&2
  exit 1
fi
mkdir -p "$bin"
tmp=$(mktemp -d "$bin/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
echo "[e2e-bin] prometheus $PROMETHEUS_VERSION: go install prometheus, promtool (a cold build takes minutes)"
# What Prometheus's own build stamps, so that `--version` tells the truth (v0.3MM.P = 3.MM.P).
minor=$(sed -E 's/^v0\.3([0-9]{2})\..*/\1/' <<<"$PROMETHEUS_VERSION")
patch=${PROMETHEUS_VERSION##*.}
ldflags="-s -w -X github.com/prometheus/common/version.Version=3.$((10#$minor)).$patch"
CGO_ENABLED=0 GOBIN="$tmp" go install -p "${TOPOPLACE_E2E_GO_P:-1}" -trimpath \
  -tags remove_all_sd,enable_kubernetes_sd -ldflags "$ldflags" \
  "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION" \
  "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
mv "$tmp/promtool" "$bin/promtool"   # only a whole binary ever has the final name
mv "$tmp/prometheus" "$bin/prometheus"
echo "[e2e-bin] prometheus $PROMETHEUS_VERSION: built in $(( $(date +%s) - t0 ))s"
