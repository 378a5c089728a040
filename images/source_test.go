package images

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
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

// TestRequireDigestBeforeLayers: an archive that holds another image than
// the one required is refused from its config, before a layer is read: a
// damaged layer is never reached.
func TestRequireDigestBeforeLayers(t *testing.T) {
	good := testLayout(t, tar.Header{Typeflag: tar.TypeReg, Name: "etc/hello", Size: 3})
	id := verifiedID(t, good)
	// Damage every blob but the manifest's and the config's.
	raw, err := os.ReadFile(filepath.Join(good, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	blobs, _ := filepath.Glob(filepath.Join(good, "blobs", "sha256", "*"))
	damaged := 0
	for _, b := range blobs {
		name := filepath.Base(b)
		if strings.Contains(string(raw), name) || strings.HasSuffix(id.String(), name) {
			continue
		}
		os.WriteFile(b, []byte("not a layer"), 0o644)
		damaged++
	}
	if damaged != 1 {
		t.Fatalf("damaged %d blobs, want the one layer", damaged)
	}
	other := digest.FromString("another image")
	_, err = Import(t.Context(), good, ImportOptions{Root: t.TempDir(), RequireDigest: other, Loader: &fakeDocker{}})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "--require-digest requires") || !strings.Contains(err.Error(), id.String()) {
		t.Fatalf("got %v, want the required image refused before the damaged layer", err)
	}
}

// writeBlob writes b as a blob of the layout at dir, and returns its
// digest and size.
func writeBlob(t *testing.T, dir string, b []byte) (string, int) {
	t.Helper()
	d := digest.FromBytes(b)
	if err := os.WriteFile(filepath.Join(dir, "blobs", "sha256", d.Encoded()), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return d.String(), len(b)
}

func indexDoc(entries []string) []byte {
	return []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[` + strings.Join(entries, ",") + `]}`)
}

// TestNestedIndexesBounded: indexes that name each other many times over
// are walked once per digest (else the work is the product of their
// sizes), and a layout naming more manifests than the bound is refused.
func TestNestedIndexesBounded(t *testing.T) {
	layoutOf := func(t *testing.T, fan, levels int) string {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755)
		os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
		leaf := make([]string, fan)
		for i := range leaf {
			leaf[i] = fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%064x","size":1,"platform":{"os":"plan9","architecture":"amd64"}}`, i)
		}
		d, n := writeBlob(t, dir, indexDoc(leaf))
		for range levels {
			e := make([]string, fan)
			for i := range e {
				e[i] = fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"%s","size":%d}`, d, n)
			}
			d, n = writeBlob(t, dir, indexDoc(e))
		}
		os.WriteFile(filepath.Join(dir, "index.json"), indexDoc([]string{fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"%s","size":%d}`, d, n)}), 0o644)
		return dir
	}
	// 200 to the fourth visits, were each digest walked each time named.
	if _, err := Open(t.Context(), layoutOf(t, 200, 3)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "holds no image") {
		t.Errorf("fanned-out indexes: %v, want no image for this platform", err)
	}
	if _, err := Open(t.Context(), layoutOf(t, maxDescriptors+1, 0)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "more than") {
		t.Errorf("an index of %d manifests: %v", maxDescriptors+1, err)
	}
}

// TestDockerArchiveSparse: a docker save archive whose layer is a sparse
// entry is refused before the layer is read (hashing it would read its
// claimed size, without end).
func TestDockerArchiveSparse(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "manifest.json"), []byte(`[{"Config":"c.json","RepoTags":["x:y"],"Layers":["l.tar"]}]`), 0o644)
	os.WriteFile(filepath.Join(src, "c.json"), []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`), 0o644)
	if err := os.WriteFile(filepath.Join(src, "l.tar"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(src, "l.tar"), 64<<20); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "save.tar")
	if out, err := exec.Command("tar", "--sparse", "--format=pax", "-C", src, "-cf", archive, "manifest.json", "c.json", "l.tar").CombinedOutput(); err != nil {
		t.Fatalf("making the archive with GNU tar --sparse: %v: %s", err, out)
	}
	if _, err := Open(t.Context(), archive); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "sparse") {
		t.Errorf("a sparse layer: %v", err)
	}
}
