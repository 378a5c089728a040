package rootonly_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/rootonly"
	"github.com/airlock-sandbox/airlock/internal/roottest"
)

// tree makes, under a new temporary directory, dir/ (mode dirMode) holding
// bin (mode binMode) and returns bin's path.
func tree(t *testing.T, dirMode, binMode os.FileMode) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "dir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for p, m := range map[string]os.FileMode{dir: dirMode, bin: binMode} {
		if err := os.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name             string
		dirMode, binMode os.FileMode
		bad              string // "" passes; else "dir" or "bin"
	}{
		{"private", 0o755, 0o755, ""},
		{"sticky directory anyone may write", 0o777 | os.ModeSticky, 0o755, ""},
		{"file anyone may write", 0o755, 0o777, "bin"},
		{"file its group may write", 0o755, 0o775, "bin"},
		{"directory anyone may write", 0o777, 0o755, "dir"},
		{"directory its group may write", 0o775, 0o755, "dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := tree(t, tc.dirMode, tc.binMode)
			err := rootonly.Check(bin)
			var e *rootonly.Error
			switch {
			case tc.bad == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.bad == "":
			case !errors.As(err, &e):
				t.Errorf("err = %v; want an *Error", err)
			case filepath.Base(e.Path) != tc.bad:
				t.Errorf("refused %s, want its %s: %v", e.Path, tc.bad, err)
			}
		})
	}
}

// A symlink is followed: what it names is checked too, and so is the
// directory that holds it.
func TestCheckFollowsSymlinks(t *testing.T) {
	bad := tree(t, 0o755, 0o777)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(bad, link); err != nil {
		t.Fatal(err)
	}
	var e *rootonly.Error
	if err := rootonly.Check(link); !errors.As(err, &e) || e.Path != bad {
		t.Errorf("Check(link to a file anyone may write) = %v; want it to name %s", err, bad)
	}

	good := tree(t, 0o755, 0o755)
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(shared, good)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rel, filepath.Join(shared, "link")); err != nil {
		t.Fatal(err)
	}
	if err := rootonly.Check(filepath.Join(shared, "link")); err != nil {
		t.Errorf("Check(relative link to a private file) = %v", err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := rootonly.Check(filepath.Join(shared, "link")); !errors.As(err, &e) || e.Path != shared {
		t.Errorf("Check(link in a directory anyone may write) = %v; want it to name %s", err, shared)
	}
	if err := rootonly.Check(filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Check(a name not there) = %v", err)
	}
}

// Another user's file, or symlink in a sticky directory, is refused.
func TestCheckOwner(t *testing.T) {
	roottest.Require(t, "chown")
	bin := tree(t, 0o755, 0o755)
	if err := os.Chown(bin, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	var e *rootonly.Error
	if err := rootonly.Check(bin); !errors.As(err, &e) || e.UID != 1000 {
		t.Errorf("Check(a file of uid 1000) = %v", err)
	}

	good := tree(t, 0o755, 0o755)
	sticky := filepath.Join(t.TempDir(), "sticky")
	if err := os.Mkdir(sticky, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(sticky, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	if err := rootonly.Check(link); err != nil {
		t.Errorf("Check(root's link in a sticky directory) = %v", err)
	}
	if err := os.Lchown(link, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := rootonly.Check(link); !errors.As(err, &e) || e.Path != link {
		t.Errorf("Check(uid 1000's link in a sticky directory) = %v", err)
	}
}
