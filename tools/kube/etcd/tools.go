//go:build tools

// Package tools records the etcd command so that `go mod tidy` keeps it.
package tools

import _ "go.etcd.io/etcd/server/v3"
