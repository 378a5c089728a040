package images

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExtractLayoutSparse: a layout tar whose blob is a sparse entry
// (a few KiB stored, 64 MiB claimed) is refused before the blob is
// written out, which would happen before any digest is checked.
func TestExtractLayoutSparse(t *testing.T) {
	src := t.TempDir()
	blob := filepath.Join(src, "blobs", "sha256", strings.Repeat("a", 64))
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
	if err := os.WriteFile(blob, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(blob, 64<<20); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "bomb.tar")
	if out, err := exec.Command("tar", "--sparse", "--format=pax", "-C", src, "-cf", archive, "oci-layout", "blobs").CombinedOutput(); err != nil {
		t.Fatalf("making the archive with GNU tar --sparse: %v: %s", err, out)
	}
	dir := t.TempDir()
	err := extractLayout(context.Background(), archive, dir)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "sparse") {
		t.Errorf("a sparse entry: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "blobs", "sha256", strings.Repeat("a", 64))); err == nil {
		t.Errorf("the sparse blob was written out: %d bytes", fi.Size())
	}
}
