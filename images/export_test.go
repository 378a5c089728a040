package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/store"
)

// putImage stores an image of one layer holding name, and returns its ID.
func putImage(t *testing.T, st *store.Store, repo, name string) digest.Digest {
	t.Helper()
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:     layerOf(t, tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: 3}),
		MediaType: types.OCILayer,
	})
	if err != nil {
		t.Fatal(err)
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	id, err := st.Put(t.Context(), img, repo)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func exportFile(t *testing.T, st *store.Store, refs ...Ref) (string, error) {
	t.Helper()
	var buf bytes.Buffer
	err := Export(t.Context(), st, refs, &buf, nil)
	p := filepath.Join(t.TempDir(), "out.tar")
	if werr := os.WriteFile(p, buf.Bytes(), 0o644); werr != nil {
		t.Fatal(werr)
	}
	return p, err
}

func TestExportRoundTrip(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	a := putImage(t, st, "team/a", "a")
	b := putImage(t, st, "team/b", "b")

	// One image: the same ID and manifest digest come back, under the
	// store's name, and a second export is byte for byte the same.
	p, err := exportFile(t, st, Ref{ID: a})
	if err != nil {
		t.Fatal(err)
	}
	src, v := openVerified(t, p)
	entries, _ := st.List()
	if v.ID != a || v.Manifest != entries[0].Manifest || src.Name != "team/a" {
		t.Fatalf("got id %s manifest %s name %q, want %s %s team/a", v.ID, v.Manifest, src.Name, a, entries[0].Manifest)
	}
	p2, err := exportFile(t, st, Ref{Name: "other/name", ID: a})
	if err != nil {
		t.Fatal(err)
	}
	src2, err := Open(t.Context(), p2)
	if err != nil {
		t.Fatal(err)
	}
	defer src2.Close()
	if src2.Name != "other/name" {
		t.Errorf("name %q, want the ref's other/name", src2.Name)
	}

	// Two images: Open alone refuses, OpenImage picks by ID, and an ID
	// that is not there wraps ErrNotRequired.
	both, err := exportFile(t, st, Ref{ID: a}, Ref{ID: b})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(t.Context(), both); !errors.Is(err, ErrFormat) {
		t.Errorf("Open of two images: %v, want ErrFormat", err)
	}
	for _, id := range []digest.Digest{a, b} {
		src, err := OpenImage(t.Context(), both, id)
		if err != nil {
			t.Fatal(err)
		}
		v, err := Verify(t.Context(), src, Limits{}, nil)
		src.Close()
		if err != nil || v.ID != id {
			t.Errorf("OpenImage %s: got %s, %v", id, v.ID, err)
		}
	}
	if _, err := OpenImage(t.Context(), both, digest.FromString("none")); !errors.Is(err, ErrNotRequired) {
		t.Errorf("OpenImage of an absent ID: %v, want ErrNotRequired", err)
	}

	// The same image twice is one image.
	twice, err := exportFile(t, st, Ref{ID: a}, Ref{Name: "x/y", ID: a})
	if err != nil {
		t.Fatal(err)
	}
	if src, err := Open(t.Context(), twice); err != nil {
		t.Errorf("Open of one image named twice: %v", err)
	} else {
		src.Close()
	}

	// Not in the store.
	if _, err := exportFile(t, st, Ref{ID: digest.FromString("none")}); err == nil {
		t.Error("exported an image the store does not hold")
	}
}

// A store blob changed on disk fails the export: nothing unverified leaves.
func TestExportRefusesDamagedBlob(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	id := putImage(t, st, "team/a", "a")
	img, err := st.Image(id)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	h, err := layers[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "oci", "blobs", h.Algorithm, h.Hex)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o444); err != nil {
		t.Fatal(err)
	}
	_, err = exportFile(t, st, Ref{ID: id})
	if !errors.Is(err, ErrDigest) {
		t.Fatalf("got %v, want ErrDigest", err)
	}
	t.Log(err)
}
