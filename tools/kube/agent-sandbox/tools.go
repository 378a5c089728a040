//go:build tools

// Package tools records the agent-sandbox controller so that `go mod tidy`
// keeps it.
package tools

import _ "sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller"
