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
	if v, err := BinaryVersion(ctx, bin, cache); v != "fake version 1" || err != nil {
		t.Fatalf("version %q, %v", v, err)
	}
	versions.Clear() // a new airlock process: only the file remembers
	if v, _ := BinaryVersion(ctx, bin, cache); v != "fake version 1" || calls() != 1 {
		t.Fatalf("version %q after %d calls; want the cached answer after 1", v, calls())
	}
	// A replaced binary is asked again.
	time.Sleep(10 * time.Millisecond)
	write("2")
	versions.Clear()
	if v, _ := BinaryVersion(ctx, bin, cache); v != "fake version 2" || calls() != 2 {
		t.Fatalf("version %q after %d calls; want the new binary asked", v, calls())
	}
	if v, err := BinaryVersion(ctx, filepath.Join(dir, "missing"), cache); err == nil || v != "" {
		t.Errorf("missing binary: %q, %v; want an error", v, err)
	}
	// A binary that fails --version is an error too, and is not cached.
	failing := filepath.Join(dir, "failing-runsc")
	os.WriteFile(failing, []byte("#!/bin/sh\necho broken >&2\nexit 3\n"), 0o755)
	if v, err := BinaryVersion(ctx, failing, cache); err == nil || !strings.Contains(err.Error(), "broken") {
		t.Errorf("failing --version: %q, %v; want an error carrying its stderr", v, err)
	}
	if _, ok := readVersions(filepath.Join(cache, "versions.json"))[binaryKey(failing)]; ok {
		t.Error("a failed --version was cached")
	}
}
