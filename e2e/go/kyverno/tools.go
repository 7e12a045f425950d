//go:build tools

// Package tools pins the Kyverno command this wrapper module builds (the admission
// controller, a peer in `make bench-e2e` only), so that `go mod tidy` keeps what it needs.
package tools

import (
	_ "github.com/kyverno/kyverno/cmd/kyverno"
)
