#!/usr/bin/env bash
# Build the bare Go webhook of `make bench-e2e` (e2e/go/barewebhook: net/http and
# encoding/json only, nothing from the module proxy) into the e2e cache, keyed by its
# source as e2e-node is, and reuse it when there. Prints the binary's path.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
bin=$(e2e_bin_dir)
mkdir -p "$bin"
src="$here/go/barewebhook"
key=$(cat "$src/go.mod" "$src/main.go" | sha256sum | cut -c1-12)
out="$bin/barewebhook-$key"
if [ ! -x "$out" ]; then
  export CGO_ENABLED=0
  export GOFLAGS=-mod=readonly
  (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$out.tmp" .) >&2
  mv "$out.tmp" "$out"   # only a whole binary ever has the final name
fi
echo "$out"
