package service

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/runner"
)

// TestListScript runs the tree listing a cluster sandbox's sh runs, here
// with the host's sh, on a tree of every kind of entry, and parses it:
// parents come before their children, a symlink (to a directory too) is
// listed as one and never entered, and a name with a newline or a
// leading dot arrives whole.
func TestListScript(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"a", "a/b", ".hid", "empty"} {
		os.Mkdir(filepath.Join(dir, d), 0o755)
	}
	for _, f := range []string{"a/one.txt", "a/b/two.txt", ".hid/x", "top.txt", "new\nline", "..dots", "*"} {
		os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644)
	}
	os.Symlink("/etc", filepath.Join(dir, "a/link"))
	syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644)
	out, err := exec.Command("sh", "-c", listScript, "airlock-cp", dir).Output()
	if err != nil {
		t.Fatalf("the listing: %v", err)
	}
	list, over, err := parseListing(out, dir, 100)
	if err != nil || over {
		t.Fatalf("parsing the listing (%d bytes): %v, over %v", len(out), err, over)
	}
	got := map[string]byte{}
	pos := map[string]int{}
	for i, e := range list {
		got[e.rel], pos[e.rel] = e.kind, i
	}
	want := map[string]byte{"a": 'd', "a/b": 'd', ".hid": 'd', "empty": 'd', "a/one.txt": 'f', "a/b/two.txt": 'f', ".hid/x": 'f',
		"top.txt": 'f', "new\nline": 'f', "..dots": 'f', "*": 'f', "a/link": 'l', "fifo": 'o'}
	if len(got) != len(want) {
		t.Errorf("listed %d entries, want %d: %q", len(got), len(want), out)
	}
	for rel, k := range want {
		if got[rel] != k {
			t.Errorf("%q listed as %q, want %q", rel, got[rel], k)
		}
	}
	if pos["a"] > pos["a/b"] || pos["a/b"] > pos["a/b/two.txt"] {
		t.Errorf("a child listed before its parent: %v", pos)
	}
	// A name the scanner refuses keeps its refusal; the rest parse.
	for _, e := range list {
		if (e.rel == "new\nline") != (e.err != nil) {
			t.Errorf("%q: refusal %v", e.rel, e.err)
		}
	}

	for code, what := range map[int]string{67: "symlink", 66: "missing", 65: "file"} {
		p := map[string]string{"symlink": filepath.Join(dir, "a/link"), "missing": filepath.Join(dir, "none"), "file": filepath.Join(dir, "top.txt")}[what]
		err := exec.Command("sh", "-c", listScript, "airlock-cp", p).Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != code {
			t.Errorf("listing a %s: %v, want exit %d", what, err, code)
		}
	}
}

// TestParseListing: the listing is the sandbox's word. A record naming
// nothing below the directory, or torn, fails the listing as data loss;
// ".." and absolute names are refused entries; past the count cap the
// listing says it is over.
func TestParseListing(t *testing.T) {
	const dir = "/home/user/d"
	rec := func(rs ...string) []byte { return []byte(strings.Join(rs, "\x00") + "\x00") }
	for _, bad := range [][]byte{
		rec("f/home/user/other"),
		rec("f/etc/passwd"),
		rec("x/home/user/d/a"),
		rec("f"),
		[]byte("f/home/user/d/a"),
	} {
		if _, _, err := parseListing(bad, dir, 10); !errors.Is(err, errdefs.ErrDataLoss) {
			t.Errorf("%q: %v, want data loss", bad, err)
		}
	}
	list, over, err := parseListing(rec("f/home/user/d/../../../etc/passwd", "f/home/user/d/ok", "d/home/user/d/", "f/home/user/d/a/./b"), dir, 10)
	if err != nil || over || len(list) != 4 {
		t.Fatalf("%v %v %d", err, over, len(list))
	}
	var te *runner.TransferError
	if !errors.As(list[0].err, &te) || te.Reason != runner.ReasonInvalidPath || list[1].err != nil || list[2].err == nil || list[3].err != nil || strings.Join(list[3].comps, "/") != "a/b" {
		t.Errorf("entries: %+v", list)
	}
	if list, over, err := parseListing(rec("f/home/user/d/1", "f/home/user/d/2", "f/home/user/d/3"), dir, 2); err != nil || !over || len(list) != 2 {
		t.Errorf("past the cap: %v, over %v, %d entries", err, over, len(list))
	}
}

// TestCapWriter: past its cap the writer drops the rest and stops once.
func TestCapWriter(t *testing.T) {
	var b strings.Builder
	stops := 0
	c := &capWriter{w: &b, left: 5, stop: func() { stops++ }}
	c.Write([]byte("abc"))
	c.Write([]byte("defg"))
	c.Write([]byte("h"))
	if b.String() != "abcde" || !c.full || stops != 1 {
		t.Errorf("wrote %q, full %v, stopped %d times", b.String(), c.full, stops)
	}
}
