package images

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/internal/imagetest"
	"github.com/airlock-sandbox/airlock/store"
)

// fakeDocker stands in for dockerd at the import's narrow seam.
type fakeDocker struct {
	loadErr error
	loaded  []digest.Digest
	removed []digest.Digest
}

func (d *fakeDocker) Ping(context.Context) error { return nil }
func (d *fakeDocker) HasImage(_ context.Context, id string) (bool, error) {
	for _, l := range d.loaded {
		if l.String() == id {
			return true, nil
		}
	}
	return false, nil
}
func (d *fakeDocker) Load(_ context.Context, _ v1.Image, id digest.Digest, _ name.Tag) error {
	if d.loadErr != nil {
		return d.loadErr
	}
	d.loaded = append(d.loaded, id)
	return nil
}
func (d *fakeDocker) RemoveImage(_ context.Context, id digest.Digest) (bool, error) {
	d.removed = append(d.removed, id)
	return true, nil
}

// testLayout writes an OCI layout of one layer holding entries.
func testLayout(t *testing.T, entries ...tar.Header) string {
	t.Helper()
	for i := range entries {
		entries[i].Mode = 0o644
	}
	l, err := imagetest.HeaderLayer(entries...)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{Layer: l, MediaType: types.OCILayer})
	if err != nil {
		t.Fatal(err)
	}
	return layoutDir(t, img)
}

// listed says whether the store's index and airlock's list id.
func listed(t *testing.T, root string, id digest.Digest) (inStore, inIndex bool) {
	t.Helper()
	st, err := store.Open(filepath.Join(root, "store"))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := OpenIndex(filepath.Join(root, "images")).List()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		inIndex = inIndex || r.ID == id
	}
	return st.Has(id), inIndex
}

func TestImportAllOrNothing(t *testing.T) {
	file := tar.Header{Typeflag: tar.TypeReg, Name: "etc/hello", Size: 3}
	good := testLayout(t, file)

	t.Run("imported", func(t *testing.T) {
		root := t.TempDir()
		d := &fakeDocker{}
		ref, err := Import(t.Context(), good, ImportOptions{Root: root, Name: "t/ok", Loader: d})
		if err != nil {
			t.Fatal(err)
		}
		if s, i := listed(t, root, ref.ID); !s || !i || len(d.loaded) != 1 {
			t.Errorf("store %v, index %v, loaded %v", s, i, d.loaded)
		}
	})
	t.Run("dockerd refuses the load", func(t *testing.T) {
		root := t.TempDir()
		d := &fakeDocker{loadErr: errdefs.ErrInternal.WithMessage("max depth exceeded")}
		_, err := Import(t.Context(), good, ImportOptions{Root: root, Name: "t/refused", Loader: d})
		if !errors.Is(err, errdefs.ErrInternal) {
			t.Fatalf("got %v, want the load's error", err)
		}
		id := verifiedID(t, good)
		if s, i := listed(t, root, id); s || i {
			t.Errorf("after a refused load: in the store index %v, in airlock's %v", s, i)
		}
		if len(d.removed) != 1 || d.removed[0] != id {
			t.Errorf("dockerd removals %v, want %s", d.removed, id)
		}
	})
	t.Run("airlock's index cannot be written", func(t *testing.T) {
		root := t.TempDir()
		os.WriteFile(filepath.Join(root, "images"), nil, 0o644) // a file where the directory goes
		d := &fakeDocker{}
		_, err := Import(t.Context(), good, ImportOptions{Root: root, Name: "t/noindex", Loader: d})
		if err == nil {
			t.Fatal("imported with no index to write")
		}
		id := verifiedID(t, good)
		st, _ := store.Open(filepath.Join(root, "store"))
		if st.Has(id) {
			t.Error("the store still lists the image")
		}
		if len(d.removed) != 1 {
			t.Errorf("dockerd removals %v, want the loaded image", d.removed)
		}
	})
	t.Run("already in dockerd is kept", func(t *testing.T) {
		root := t.TempDir()
		d := &fakeDocker{loaded: []digest.Digest{verifiedID(t, good)}, loadErr: errors.New("load failed")}
		if _, err := Import(t.Context(), good, ImportOptions{Root: root, Name: "t/had", Loader: d}); err == nil {
			t.Fatal("no error")
		}
		if len(d.removed) != 0 {
			t.Errorf("removed %v from dockerd, which held it before the import", d.removed)
		}
	})
	for _, h := range []tar.Header{
		{Typeflag: tar.TypeReg, Name: "../escape", Size: 1},
		{Typeflag: tar.TypeReg, Name: "/etc/passwd", Size: 1},
		{Typeflag: tar.TypeSymlink, Name: "up", Linkname: "../../.."},
		{Typeflag: tar.TypeLink, Name: "shadow", Linkname: "/etc/shadow"},
	} {
		t.Run("unsafe layer "+h.Name, func(t *testing.T) {
			root := t.TempDir()
			d := &fakeDocker{}
			bad := testLayout(t, file, h)
			_, err := Import(t.Context(), bad, ImportOptions{Root: root, Name: "t/bad", Loader: d})
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !errors.Is(err, store.ErrUnsafeLayer) || !bytes.Contains([]byte(err.Error()), []byte(h.Name)) {
				t.Fatalf("got %v, want invalid input naming %q", err, h.Name)
			}
			if len(d.loaded) != 0 {
				t.Error("loaded into dockerd")
			}
			recs, _ := OpenIndex(filepath.Join(root, "images")).List()
			st, _ := store.Open(filepath.Join(root, "store"))
			if ents, _ := st.List(); len(recs) != 0 || len(ents) != 0 {
				t.Errorf("listed: %v %v", recs, ents)
			}
			t.Log(err)
		})
	}
}

func verifiedID(t *testing.T, path string) digest.Digest {
	t.Helper()
	_, v := openVerified(t, path)
	return v.ID
}

// openVerified opens and verifies the image at path; it is closed when
// the test ends.
func openVerified(t *testing.T, path string) (*Source, Verified) {
	t.Helper()
	src, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	v, err := Verify(t.Context(), src, Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src, v
}

// --require-digest refuses any other image, as invalid input, before
// anything is stored or loaded; the right digest imports.
// RequireDigest refuses any other image, as invalid input, before
// anything is stored or loaded; the right digest imports.
func TestImportRequireDigest(t *testing.T) {
	good := testLayout(t, tar.Header{Typeflag: tar.TypeReg, Name: "etc/hello", Size: 3})
	id := verifiedID(t, good)
	root := t.TempDir()
	d := &fakeDocker{}
	other := digest.FromString("another image")
	_, err := Import(t.Context(), good, ImportOptions{Root: root, RequireDigest: other, Loader: d})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), other.String()) || !strings.Contains(err.Error(), id.String()) {
		t.Fatalf("got %v, want invalid input naming both images", err)
	}
	if s, i := listed(t, root, id); s || i || len(d.loaded) != 0 {
		t.Fatalf("a refused import: store %v, index %v, loaded %v", s, i, d.loaded)
	}
	ref, err := Import(t.Context(), good, ImportOptions{Root: root, RequireDigest: id, Loader: d})
	if err != nil || ref.ID != id {
		t.Fatalf("import of the required image: %v, %v", ref, err)
	}
}
