// Package roottest is for unit tests that need root (to mount, make
// cgroups or loop devices, or chown): without it they skip and say why,
// so `make unit` runs as any user; `make test`, as root, runs them all.
package roottest

import (
	"os"
	"testing"
)

// Require skips t unless the test runs as root; why says what needs it.
func Require(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root (%s); `make test` runs it as root", why)
	}
}
