package runner

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/roottest"
)

// mounted reports whether path is a mount point now: its device differs
// from its parent's. A path that is gone is not one.
func mounted(path string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(path, &st) != nil || unix.Stat(filepath.Dir(path), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// orphanRunWithTmpfs makes dir/runs/id/out a tmpfs holding a file, with an
// owner file naming nobody alive, as a killed airlock leaves a run, and
// returns the tmpfs's path.
func orphanRunWithTmpfs(t *testing.T, dir, id string) string {
	t.Helper()
	run := filepath.Join(dir, "runs", id)
	out := filepath.Join(run, "out")
	if err := os.MkdirAll(out, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, ownerFile), []byte(`{"pid":1,"start":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	mountTmpfs(t, out)
	return out
}

// mountTmpfs mounts a small tmpfs at dir, with a file in it, and unmounts
// it at the end should the test not have.
func mountTmpfs(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m"); err != nil {
		t.Fatalf("mounting a tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(dir, "artifact"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// airlock's root reached through a symlink (SECURITY.md: state kept
// elsewhere by symlink): a reap after a kill -9 still unmounts the run's
// tmpfs and removes its directory. mountinfo names the mount by its real
// path, never the link's.
func TestReapSymlinkedRootUnmounts(t *testing.T) {
	roottest.Require(t, "the test mounts a tmpfs")
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "root")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	const id = "0123456789abcdef0123"
	out := orphanRunWithTmpfs(t, real, id)
	rep, err := Reap(context.Background(), link, nil, false)
	if err != nil {
		t.Errorf("reap: %v", err)
	}
	if len(rep.Reaped) != 1 {
		t.Errorf("reaped %v; want %s", rep.Reaped, id)
	}
	if mounted(out) {
		t.Errorf("after the reap the run's tmpfs %s is still mounted (the root %s is a symlink)", out, link)
	}
	if _, err := os.Stat(filepath.Join(real, "runs", id)); err == nil {
		t.Errorf("after the reap the run's directory is still there")
	}
}

// The same with a relative root (`airlock --root ./state`,
// AIRLOCK_ROOT=state): mountinfo's paths are absolute.
func TestReapRelativeRootUnmounts(t *testing.T) {
	roottest.Require(t, "the test mounts a tmpfs")
	base := t.TempDir()
	t.Chdir(base)
	const id = "0123456789abcdef0124"
	out := orphanRunWithTmpfs(t, filepath.Join(base, "state"), id)
	if _, err := Reap(context.Background(), "state", nil, false); err != nil {
		t.Errorf("reap: %v", err)
	}
	if mounted(out) {
		t.Errorf("after the reap the run's tmpfs %s is still mounted (the root is relative)", out)
	}
	if _, err := os.Stat(filepath.Join(base, "state", "runs", id)); err == nil {
		t.Errorf("after the reap the run's directory is still there")
	}
}

// mountsUnder finds the mounts under a directory named as the caller has
// it, whatever the root it came from: reached through a symlink, or with
// a space in its path, which mountinfo writes as \040. RemoveAreas is
// given a sandbox's directory as its record names it, so it is tried with
// each.
func TestRemoveAreasFindsMountsByRealPath(t *testing.T) {
	roottest.Require(t, "the test mounts a tmpfs")
	for _, tc := range []struct {
		name string
		dir  func(base string) (real, given string)
	}{
		{"symlink", func(base string) (string, string) {
			real := filepath.Join(base, "real")
			os.Symlink(real, filepath.Join(base, "link"))
			return real, filepath.Join(base, "link")
		}},
		{"space", func(base string) (string, string) {
			d := filepath.Join(base, "airlock state")
			return d, d
		}},
		{"tab and backslash", func(base string) (string, string) {
			d := filepath.Join(base, "a\tb\\c")
			return d, d
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			real, given := tc.dir(t.TempDir())
			sandbox := filepath.Join(real, "sandboxes", "sb-0123456789abcdef0123")
			ws := filepath.Join(sandbox, "workspace")
			if err := os.MkdirAll(ws, 0o700); err != nil {
				t.Fatal(err)
			}
			mountTmpfs(t, ws)
			if err := RemoveAreas(context.Background(), filepath.Join(given, "sandboxes", "sb-0123456789abcdef0123")); err != nil {
				t.Errorf("RemoveAreas: %v", err)
			}
			if mounted(ws) {
				t.Errorf("the sandbox's mount %q is still there", ws)
			}
			if _, err := os.Stat(sandbox); err == nil {
				t.Errorf("the sandbox's directory is still there")
			}
		})
	}
}

// mountinfo escapes a space, tab, newline and backslash in a path as
// three octal digits; nothing else in a path is changed.
func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`/var/lib/airlock`:           "/var/lib/airlock",
		`/srv/airlock\040state/runs`: "/srv/airlock state/runs",
		`/a\011b\012c\134d`:          "/a\tb\nc\\d",
		`/trailing\04`:               `/trailing\04`,
		`/not\999octal`:              `/not\999octal`,
		`/\134040`:                   `/\040`,
	} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q; want %q", in, got, want)
		}
	}
}

// A root enters the library absolute, its symlinks resolved (those of the
// part that exists: the rest is made later, as plain directories): a
// relative root would change meaning with the working directory, and
// mountinfo names mounts by real path.
func TestNewResolvesRoot(t *testing.T) {
	base := roottest.LinkedDir(t)
	r, err := New(WithRoot("link"), WithEngine(&fakeSandboxer{}))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(base, "real"); r.root != want {
		t.Errorf("WithRoot(%q): root %q; want %q (realpath.Of)", "link", r.root, want)
	}
}
