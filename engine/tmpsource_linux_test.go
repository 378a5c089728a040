package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/roottest"
)

// Only the root of a nosuid,nodev tmpfs is a /tmp source: not one
// missing either flag, not a directory inside one, not a symlink to one,
// not a plain directory.
func TestCheckTmpSource(t *testing.T) {
	roottest.Require(t, "it mounts tmpfs")
	dir := t.TempDir()
	mount := func(name string, flags uintptr) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", flags, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(p, unix.MNT_DETACH) })
		return p
	}
	good := mount("good", unix.MS_NOSUID|unix.MS_NODEV)
	if err := CheckTmpSource(good); err != nil {
		t.Fatalf("a nosuid,nodev tmpfs root refused: %v", err)
	}
	sub := filepath.Join(good, "sub")
	os.Mkdir(sub, 0o755)
	link := filepath.Join(dir, "link")
	os.Symlink(good, link)
	plain := filepath.Join(dir, "plain")
	os.Mkdir(plain, 0o755)
	for name, p := range map[string]string{
		"suid":      mount("suid", unix.MS_NODEV),
		"dev":       mount("dev", unix.MS_NOSUID),
		"subdir":    sub,
		"symlink":   link,
		"plain dir": plain,
		"missing":   filepath.Join(dir, "missing"),
	} {
		if err := CheckTmpSource(p); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%s: err = %v, want invalid argument", name, err)
		}
	}
}
