package store

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
)

// FuzzStoreIndex replaces the store's index.json with the bytes (where
// "@ID@" and "@M@" stand for the ID and manifest digest of the one image
// the store holds) and reads the store back as every run does: List, Has,
// Image and Config. Every entry listed has a sha256 ID and a valid
// manifest digest; an image read back is exactly the one whose manifest
// and config blobs have the digests the index gives, whatever else the
// index claims.
func FuzzStoreIndex(f *testing.F) {
	s, err := Open(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(layer(f, "", reg("a", "x")), types.OCIUncompressedLayer), MediaType: types.OCIUncompressedLayer}); err != nil {
		f.Fatal(err)
	}
	id, err := s.Put(context.Background(), img, "fz:1")
	if err != nil {
		f.Fatal(err)
	}
	valid, err := os.ReadFile(s.indexPath())
	if err != nil {
		f.Fatal(err)
	}
	entries, err := s.List()
	if err != nil || len(entries) != 1 {
		f.Fatalf("a fresh store lists %v, %v", entries, err)
	}
	man := entries[0].Manifest
	// The index as written, with the image's digests as placeholders.
	seed := bytes.ReplaceAll(bytes.ReplaceAll(valid, []byte(id), []byte("@ID@")), []byte(man), []byte("@M@"))
	f.Add(seed)
	f.Add(bytes.ReplaceAll(seed, []byte(`"@ID@"`), []byte(`"@M@"`)))
	f.Add(bytes.ReplaceAll(seed, []byte(`"digest": "@M@"`), []byte(`"digest": "@ID@"`)))
	f.Add(bytes.ReplaceAll(seed, []byte(`"@ID@"`), []byte(`"sha256:../../etc/passwd"`)))
	f.Add(bytes.ReplaceAll(seed, []byte(`"@ID@"`), []byte(`"sha512:`+strings.Repeat("a", 128)+`"`)))
	for _, b := range []string{``, `{}`, `null`, `[]`, `{"manifests":null}`, `{"manifests":[{}]}`} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = bytes.ReplaceAll(bytes.ReplaceAll(b, []byte("@ID@"), []byte(id)), []byte("@M@"), []byte(man))
		if err := os.WriteFile(s.indexPath(), b, 0o644); err != nil {
			t.Fatal(err)
		}
		list, err := s.List()
		if err != nil {
			return
		}
		for _, e := range list {
			if checkID(e.ID) != nil || e.Manifest.Validate() != nil {
				t.Fatalf("listed %+v", e)
			}
			if !s.Has(e.ID) {
				t.Fatalf("%s is listed, yet Has says no", e.ID)
			}
			got, err := s.Image(e.ID)
			if err != nil {
				continue
			}
			raw, err := got.RawManifest()
			if err != nil || digest.FromBytes(raw) != man {
				t.Fatalf("image %s read back with manifest %s (%v), not the stored %s", e.ID, digest.FromBytes(raw), err, man)
			}
			cfg, err := got.RawConfigFile()
			if err != nil || digest.FromBytes(cfg) != e.ID || e.ID != id {
				t.Fatalf("image %s read back with config %s (%v)", e.ID, digest.FromBytes(cfg), err)
			}
		}
		if _, err := s.Config(id); err != nil {
			t.Fatalf("the config blob of %s no longer reads: %v", id, err)
		}
	})
}
