package artifacts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gabriel-vasile/mimetype"
	"golang.org/x/sys/unix"
)

func TestSessionTypesKnown(t *testing.T) {
	for _, ty := range append(SessionTypes, sourceTypes...) {
		if mimetype.Lookup(ty) == nil {
			t.Errorf("%s is not a type the detector knows", ty)
		}
	}
	for _, bad := range []string{"text/html", "image/svg+xml", "text/xml", "application/xhtml+xml"} {
		if allowed(SessionTypes, mimetype.Lookup(bad)) {
			t.Errorf("the sessions allowlist takes %s", bad)
		}
	}
}

func copyOne(t *testing.T, dir, name string, body []byte, opt FileOptions) (Artifact, *Rejection, []byte) {
	t.Helper()
	if body != nil {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var buf bytes.Buffer
	art, rej, err := CopyFile(context.Background(), fd, name, name, &buf, opt)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if rej != nil && buf.Len() > 0 {
		t.Errorf("%s: refused (%s) after writing %d bytes", name, rej.Reason, buf.Len())
	}
	return art, rej, buf.Bytes()
}

func TestCopyFile(t *testing.T) {
	dir := t.TempDir()
	session := FileOptions{MaxBytes: 1 << 20, Types: SessionTypes, SourceText: true}
	plain := FileOptions{MaxBytes: 1 << 20}
	for _, c := range []struct {
		name string
		body string
		opt  FileOptions
		want Reason // "" accepted
	}{
		{"m.py", "import os\n", session, ""},
		{"m.py", "import os\n", plain, ReasonTypeMismatch},
		{"run.sh", "#!/bin/sh\necho hi\n", session, ""},
		{"run.sh", "#!/bin/sh\necho hi\n", plain, ReasonTypeNotAllowed},
		{"cfg.yaml", "a: 1\n", session, ""},
		{"nb.ipynb", `{"cells": []}`, session, ""},
		{"page.py", "<!DOCTYPE html><html><body>x</body></html>", session, ReasonTypeNotAllowed},
		{"pic.txt", `<svg xmlns="http://www.w3.org/2000/svg"></svg>`, session, ReasonTypeNotAllowed},
		{"page.html", "just text\n", session, ReasonTypeMismatch},
		{"x.svg", "just text\n", session, ReasonTypeMismatch},
		{".bashrc", "alias x=y\n", session, ReasonHiddenName},
		{"big.txt", string(bytes.Repeat([]byte("a"), 2<<20)), session, ReasonTooLarge},
	} {
		art, rej, got := copyOne(t, dir, c.name, []byte(c.body), c.opt)
		switch {
		case c.want == "" && rej != nil:
			t.Errorf("%s (source text %v): refused %s: %s", c.name, c.opt.SourceText, rej.Reason, rej.Detail)
		case c.want != "" && rej == nil:
			t.Errorf("%s (source text %v): accepted as %s, want %s", c.name, c.opt.SourceText, art.MIME, c.want)
		case c.want != "" && rej.Reason != c.want:
			t.Errorf("%s: refused %s, want %s", c.name, rej.Reason, c.want)
		case c.want == "":
			sum := sha256.Sum256([]byte(c.body))
			if string(got) != c.body || art.SHA256 != hex.EncodeToString(sum[:]) || art.Size != int64(len(c.body)) {
				t.Errorf("%s: wrote %d bytes, record %+v", c.name, len(got), art)
			}
		}
	}
	os.Symlink("m.py", filepath.Join(dir, "link.py"))
	unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.Link(filepath.Join(dir, "m.py"), filepath.Join(dir, "hard.py"))
	for name, want := range map[string]Reason{"link.py": ReasonSymlink, "fifo": ReasonNotRegular, "sub": ReasonIsDirectory, "hard.py": ReasonHardlink, "a\x01b": ReasonBadName} {
		if _, rej, _ := copyOne(t, dir, name, nil, session); rej == nil || rej.Reason != want {
			t.Errorf("%q: %+v, want %s", name, rej, want)
		}
	}
}

// A file that grows past the cap while being read ends in ErrGrew.
func TestCopyFileGrows(t *testing.T) {
	dir := t.TempDir()
	// Longer than one copy buffer, so reading goes on after the first write.
	os.WriteFile(filepath.Join(dir, "log.txt"), bytes.Repeat([]byte("line\n"), 100_000), 0o644)
	fd, _ := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	defer unix.Close(fd)
	grow := &growWriter{path: filepath.Join(dir, "log.txt")}
	_, rej, err := CopyFile(context.Background(), fd, "log.txt", "log.txt", grow, FileOptions{MaxBytes: 1 << 20})
	if !errors.Is(err, ErrGrew) || rej != nil {
		t.Fatalf("got %v, %+v; want ErrGrew", err, rej)
	}
	if grow.n > 1<<20+1 {
		t.Errorf("wrote %d bytes past a 1MiB cap", grow.n)
	}
}

// growWriter appends 2MiB to the file being copied on its first write.
type growWriter struct {
	path string
	n    int
}

func (g *growWriter) Write(p []byte) (int, error) {
	if g.n == 0 {
		f, _ := os.OpenFile(g.path, os.O_APPEND|os.O_WRONLY, 0)
		f.Write(bytes.Repeat([]byte("more\n"), (2<<20)/5))
		f.Close()
	}
	g.n += len(p)
	return len(p), nil
}

// A sparse file is refused unread, as Collect refuses it: its size costs
// the sandbox nothing, its reading costs the host.
func TestCopyFileSparse(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "zeros.bin"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(1 << 30)
	f.Close()
	fd, _ := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	defer unix.Close(fd)
	w := CountingWriter{W: io.Discard}
	_, rej, err := CopyFile(context.Background(), fd, "zeros.bin", "zeros.bin", &w, FileOptions{MaxBytes: 2 << 30, Types: []string{"application/octet-stream"}})
	if err != nil || rej == nil || rej.Reason != ReasonTooLarge || !strings.Contains(rej.Detail, "a sparse file") || w.N != 0 {
		t.Errorf("%v, %+v, %d bytes written; want refused unread as sparse", err, rej, w.N)
	}
}
