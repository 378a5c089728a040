package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBinaryVersionCache(t *testing.T) {
	dir := t.TempDir()
	bin, count := filepath.Join(dir, "fake-runsc"), filepath.Join(dir, "count")
	write := func(v string) {
		os.WriteFile(bin, []byte("#!/bin/sh\necho x >> "+count+"\necho 'fake version "+v+"'\necho second line\n"), 0o755)
	}
	calls := func() int { b, _ := os.ReadFile(count); return strings.Count(string(b), "x") }
	write("1")
	cache := filepath.Join(dir, "cache")
	ctx := context.Background()
	if v := BinaryVersion(ctx, bin, cache); v != "fake version 1" {
		t.Fatalf("version %q", v)
	}
	versions.Clear() // a new airlock process: only the file remembers
	if v := BinaryVersion(ctx, bin, cache); v != "fake version 1" || calls() != 1 {
		t.Fatalf("version %q after %d calls; want the cached answer after 1", v, calls())
	}
	// A replaced binary is asked again.
	time.Sleep(10 * time.Millisecond)
	write("2")
	versions.Clear()
	if v := BinaryVersion(ctx, bin, cache); v != "fake version 2" || calls() != 2 {
		t.Fatalf("version %q after %d calls; want the new binary asked", v, calls())
	}
	if v := BinaryVersion(ctx, filepath.Join(dir, "missing"), cache); v != "unknown" {
		t.Errorf("missing binary: %q", v)
	}
}
