package safeopen

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/roottest"
)

func needRoot(t *testing.T) {
	t.Helper()
	roottest.Require(t, "chown to another uid")
}

func TestDirCreatesAndOpens(t *testing.T) {
	base := t.TempDir()
	p := filepath.Join(base, "a", "b", "c")
	f, err := Dir(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
		t.Fatalf("not created: %v %v", fi, err)
	}
	// An existing directory is reused.
	g, err := Dir(p)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
}

func TestDirRefusesFinalSymlink(t *testing.T) {
	base, private := t.TempDir(), t.TempDir()
	link := filepath.Join(base, "art")
	os.Symlink(private, link)
	_, err := Dir(link)
	if !errors.Is(err, ErrUnsafe) {
		t.Fatalf("symlinked destination opened: %v", err)
	}
	t.Log(err)
}

func TestDirRefusesOtherUsersDir(t *testing.T) {
	needRoot(t)
	p := filepath.Join(t.TempDir(), "art")
	os.Mkdir(p, 0o755)
	os.Chown(p, 1234, 1234)
	_, err := Dir(p)
	if !errors.Is(err, ErrUnsafe) {
		t.Fatalf("directory of uid 1234 opened: %v", err)
	}
	t.Log(err)
}

func TestSymlinkInPathFollowedOnlyWhenTrusted(t *testing.T) {
	needRoot(t)
	base, private := t.TempDir(), t.TempDir()
	mine := filepath.Join(base, "mine")
	os.Symlink(private, mine)
	f, err := Dir(filepath.Join(mine, "x"))
	if err != nil {
		t.Fatalf("root's own symlink not followed: %v", err)
	}
	f.Close()
	theirs := filepath.Join(base, "theirs")
	os.Symlink(private, theirs)
	os.Lchown(theirs, 1234, 1234)
	if _, err := Dir(filepath.Join(theirs, "y")); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("followed uid 1234's symlink: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(private, "y")); err == nil {
		t.Error("created a directory through uid 1234's symlink")
	}
	if _, err := AppendFile(filepath.Join(theirs, "r.jsonl")); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("followed uid 1234's symlink: %v", err)
	}
}

func TestAppendFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "results.jsonl")
	for _, line := range []string{"one\n", "two\n"} {
		f, err := AppendFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(line)
		f.Close()
	}
	if b, _ := os.ReadFile(p); string(b) != "one\ntwo\n" {
		t.Errorf("got %q", b)
	}
	wd, _ := os.Getwd()
	defer os.Chdir(wd)
	os.Chdir(dir)
	f, err := AppendFile("results.jsonl")
	if err != nil {
		t.Fatalf("relative path: %v", err)
	}
	f.Close()
}

func TestAppendFileRefusesSymlinkAndOddFiles(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("root only\n"), 0o600)
	link := filepath.Join(dir, "results.jsonl")
	os.Symlink(secret, link)
	if _, err := AppendFile(link); !errors.Is(err, ErrUnsafe) {
		t.Errorf("symlinked --out opened: %v", err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "root only\n" {
		t.Errorf("the link's target changed: %q", b)
	}
	fifo := filepath.Join(dir, "fifo")
	syscall.Mkfifo(fifo, 0o644)
	if f, err := AppendFile(fifo); err == nil {
		f.Close()
		t.Error("a FIFO opened as the results file")
	}
	if f, err := AppendFile(dir); err == nil {
		f.Close()
		t.Error("a directory opened as the results file")
	}
}

func TestAppendFileRefusesOtherUsersFile(t *testing.T) {
	needRoot(t)
	p := filepath.Join(t.TempDir(), "results.jsonl")
	os.WriteFile(p, nil, 0o666)
	os.Chown(p, 1234, 1234)
	if _, err := AppendFile(p); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("file of uid 1234 opened: %v", err)
	}
}
