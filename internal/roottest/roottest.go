// Package roottest is for unit tests that need root (to mount, make
// cgroups or loop devices, or chown): without it they skip and say why,
// so `make unit` runs as any user; `make test`, as root, runs them all.
// It also holds the fixture of airlock's root given through a symlink.
package roottest

import (
	"os"
	"path/filepath"
	"testing"
)

// Require skips t unless the test runs as root; why says what needs it.
func Require(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root (%s); `make test` runs it as root", why)
	}
}

// LinkedDir makes, in a new temporary directory (its path resolved),
// "real" and "link", a relative symlink to it, makes that directory the
// working directory for t, and returns it: the fixture of a root given
// relative or through a symlink.
func LinkedDir(t *testing.T) string {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(base, "real"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(base)
	return base
}
