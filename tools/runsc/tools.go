//go:build tools

// Package tools records the runsc dependency so that `go mod tidy` keeps it.
package tools

import _ "gvisor.dev/gvisor/runsc"
