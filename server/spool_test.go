package server

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/runner"
)

// Spool files share one budget: a write past it is refused as
// unavailable, naming --max-spool, and what a file held is given back as
// it is cut or closed.
func TestSpoolBudget(t *testing.T) {
	s, _ := newTestServer(t, nil)
	s.spoolBudget = &spoolBudget{max: 1 << 20}
	a, err := s.spool()
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.spool()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	half := bytes.Repeat([]byte("a"), 512<<10)
	if _, err := a.Write(half); err != nil {
		t.Fatal(err)
	}
	// Rewriting what a file already holds costs nothing more.
	a.Seek(0, io.SeekStart)
	if _, err := a.Write(half); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(half); err != nil {
		t.Fatal(err)
	}
	_, err = b.Write([]byte("x"))
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "--max-spool 1MiB") {
		t.Fatalf("a write past the budget: %v", err)
	}
	if kindOf(err) != KindUnavailable {
		t.Fatalf("kind %s", kindOf(err))
	}
	// A copy into a spool is counted too (os.File's ReadFrom would not be).
	if _, err := io.Copy(b, strings.NewReader("x")); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("io.Copy past the budget: %v", err)
	}
	if err := a.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(b, strings.NewReader("x")); err != nil {
		t.Fatalf("after a truncate: %v", err)
	}
	a.Close()
	if got := s.spoolBudget.held.Load(); got != 512<<10+1 {
		t.Fatalf("held %d after a close", got)
	}

	// A tar sink's spool is reused per file: the budget holds the largest.
	var out bytes.Buffer
	sink := runner.NewTarSink(&out, b)
	for range 3 {
		f, err := sink.File("f")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(half); err != nil {
			t.Fatal(err)
		}
		if err := f.Commit(runner.Transfer{Size: int64(len(half))}); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.spoolBudget.held.Load(); got != 512<<10 {
		t.Fatalf("held %d after three files of 512KiB", got)
	}
	b.Close()
	if got := s.spoolBudget.held.Load(); got != 0 {
		t.Fatalf("held %d with every spool closed", got)
	}
}
