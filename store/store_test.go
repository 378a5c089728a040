package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ociImage makes an OCI image with one layer per tar, stored uncompressed,
// or gzipped if gzipped is set.
func ociImage(t *testing.T, gzipped bool, layers ...v1.Layer) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range layers {
		mt := types.OCIUncompressedLayer
		if gzipped {
			mt = types.OCILayer
		}
		var err error
		img, err = mutate.Append(img, mutate.Addendum{Layer: l, MediaType: mt})
		if err != nil {
			t.Fatal(err)
		}
	}
	return img
}

func plainLayer(t *testing.T, es ...ent) v1.Layer {
	return static.NewLayer(layer(t, "", es...), types.OCIUncompressedLayer)
}

func gzipLayer(t *testing.T, es ...ent) v1.Layer {
	b := layer(t, "", es...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func configID(t *testing.T, img v1.Image) digest.Digest {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return digest.Digest(h.String())
}

func TestPutImageRoundTrip(t *testing.T) {
	s := openStore(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		img  func(t *testing.T) v1.Image
	}{
		{"random docker gzip", func(t *testing.T) v1.Image {
			img, err := random.Image(1024, 3)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}},
		{"oci uncompressed", func(t *testing.T) v1.Image {
			return ociImage(t, false, plainLayer(t, reg("a", "a")), plainLayer(t, reg("b", "b")))
		}},
		{"oci gzip", func(t *testing.T) v1.Image { return ociImage(t, true, gzipLayer(t, reg("a", "a"))) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := tc.img(t)
			want := configID(t, img)
			id, err := s.Put(ctx, img, "test/"+strings.ReplaceAll(tc.name, " ", "-"))
			if err != nil {
				t.Fatal(err)
			}
			if id != want {
				t.Fatalf("Put = %s, want the config digest %s", id, want)
			}
			if !s.Has(id) {
				t.Fatal("Has = false after Put")
			}
			back, err := s.Image(id)
			if err != nil {
				t.Fatal(err)
			}
			if got := configID(t, back); got != id {
				t.Errorf("read back config %s, want %s", got, id)
			}
			d1, _ := img.Digest()
			d2, _ := back.Digest()
			if d1 != d2 {
				t.Errorf("manifest digest %s, want %s", d2, d1)
			}
			l1, _ := img.Layers()
			l2, err := back.Layers()
			if err != nil || len(l1) != len(l2) {
				t.Fatalf("layers: %d, %v; want %d", len(l2), err, len(l1))
			}
			for i := range l1 {
				a, _ := l1[i].Digest()
				b, _ := l2[i].Digest()
				if a != b {
					t.Errorf("layer %d digest %s, want %s", i, b, a)
				}
			}
		})
	}
	if s.Has(digest.FromString("not an image")) {
		t.Error("Has an image never put")
	}
	if _, err := s.Image(digest.FromString("not an image")); !errdefs.IsNotFound(err) {
		t.Errorf("Image(unknown) = %v, want not found", err)
	}
	if _, err := s.Image("sha256:../../etc"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Image(bad id) = %v, want invalid argument", err)
	}
	if _, err := s.Config("sha256:../../etc"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Config(bad id) = %v, want invalid argument", err)
	}
}

// Config gives back the environment and working directory an image was
// built with, read from its config blob alone.
func TestConfig(t *testing.T) {
	s := openStore(t)
	img, err := mutate.Config(ociImage(t, false, plainLayer(t, reg("a", "a"))), v1.Config{Env: []string{"PATH=/opt/bin", "LANG=C.UTF-8"}, WorkingDir: "/srv"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Put(t.Context(), img, "test/config")
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Config(id)
	if err != nil || !slices.Equal(got.Config.Env, []string{"PATH=/opt/bin", "LANG=C.UTF-8"}) || got.Config.WorkingDir != "/srv" {
		t.Errorf("Config = %+v, %v; want the env and workdir put", got.Config, err)
	}
	if _, err := s.Config(digest.FromString("not an image")); err == nil {
		t.Error("Config of a blob the store lacks: no error")
	}
}

// TestConfigOverCap: a config larger than MaxConfig (stored before
// import refused such configs) is reported as over the cap, not as a
// digest mismatch that would call the store damaged.
func TestConfigOverCap(t *testing.T) {
	s := openStore(t)
	img, err := mutate.Config(ociImage(t, false, plainLayer(t, reg("a", "a"))), v1.Config{Env: []string{"BIG=" + strings.Repeat("x", int(MaxConfig))}})
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Put(t.Context(), img, "test/bigconfig")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Config(id)
	if err == nil || errors.Is(err, ErrDigest) || !strings.Contains(err.Error(), "larger than the "+MaxConfig.String()+" cap") {
		t.Fatalf("got %v, want the config named larger than the cap", err)
	}
}

func TestPutLayout(t *testing.T) {
	s := openStore(t)
	img, err := random.Image(100, 2)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Put(t.Context(), img, "airlock/py")
	if err != nil {
		t.Fatal(err)
	}
	oci := filepath.Join(s.dir, "oci")
	var lay ocispec.ImageLayout
	readJSON(t, filepath.Join(oci, "oci-layout"), &lay)
	if lay.Version != ocispec.ImageLayoutVersion {
		t.Errorf("oci-layout version %q", lay.Version)
	}
	var idx ocispec.Index
	readJSON(t, filepath.Join(oci, "index.json"), &idx)
	m, _ := img.Digest()
	if len(idx.Manifests) != 1 {
		t.Fatalf("index lists %d manifests", len(idx.Manifests))
	}
	d := idx.Manifests[0]
	if d.Digest.String() != m.String() || d.Annotations[ocispec.AnnotationRefName] != "airlock/py" || d.Annotations[AnnotationImageID] != id.String() {
		t.Errorf("index entry %+v", d)
	}
	// Every blob the manifest names, and the manifest, under blobs/sha256.
	mf, _ := img.Manifest()
	want := []v1.Hash{m, mf.Config.Digest}
	for _, l := range mf.Layers {
		want = append(want, l.Digest)
	}
	names := dirNames(t, filepath.Join(oci, "blobs", "sha256"))
	if len(names) != len(want) {
		t.Errorf("blobs %q, want %d", names, len(want))
	}
	for _, h := range want {
		if _, err := os.Stat(filepath.Join(oci, "blobs", "sha256", h.Hex)); err != nil {
			t.Error(err)
		}
	}
	entries, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0] != (Entry{Name: "airlock/py", ID: id, Manifest: digest.Digest(m.String())}) {
		t.Errorf("List = %+v", entries)
	}
}

func readJSON(t *testing.T, p string, v any) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func TestPutIdempotent(t *testing.T) {
	s := openStore(t)
	img, err := random.Image(100, 2)
	if err != nil {
		t.Fatal(err)
	}
	id1, err := s.Put(t.Context(), img, "a")
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(s.indexPath())
	id2, err := s.Put(t.Context(), img, "a")
	if err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(s.indexPath())
	if id1 != id2 || !bytes.Equal(before, after) {
		t.Errorf("second Put: id %s then %s; index changed: %v", id1, id2, !bytes.Equal(before, after))
	}
	// A second name adds an entry; the same name on another image moves.
	if _, err := s.Put(t.Context(), img, "b"); err != nil {
		t.Fatal(err)
	}
	other, _ := random.Image(100, 1)
	id3, err := s.Put(t.Context(), other, "a")
	if err != nil {
		t.Fatal(err)
	}
	// Unnamed, an image already listed adds nothing; a new one is listed
	// until it gets a name.
	if _, err := s.Put(t.Context(), other, ""); err != nil {
		t.Fatal(err)
	}
	third, _ := random.Image(100, 1)
	fourth, _ := random.Image(100, 1)
	id4, err := s.Put(t.Context(), third, "")
	if err != nil {
		t.Fatal(err)
	}
	id5, err := s.Put(t.Context(), fourth, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), third, "c"); err != nil {
		t.Fatal(err)
	}
	entries, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]digest.Digest{}
	for _, e := range entries {
		got[e.Name] = e.ID
	}
	if want := map[string]digest.Digest{"b": id1, "a": id3, "": id5, "c": id4}; !maps.Equal(got, want) || len(entries) != len(want) {
		t.Errorf("List = %+v, want %v", entries, want)
	}
	for _, n := range dirNames(t, s.blobDir()) {
		if strings.HasPrefix(n, ".tmp-") {
			t.Errorf("temporary blob %q left behind", n)
		}
	}
}

// brokenLayer fails partway through its blob.
type brokenLayer struct{ v1.Layer }

func (l brokenLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(io.MultiReader(strings.NewReader("partial"), iotest.ErrReader(errors.New("disk on fire")))), nil
}

// forgedLayer serves other bytes than its digest names.
type forgedLayer struct{ v1.Layer }

func (l forgedLayer) Compressed() (io.ReadCloser, error) {
	b, _ := io.ReadAll(must(l.Layer.Compressed()))
	b[len(b)-1] ^= 1
	return io.NopCloser(bytes.NewReader(b)), nil
}

// lyingLayer gives a diff_id its content does not have.
type lyingLayer struct{ v1.Layer }

func (lyingLayer) DiffID() (v1.Hash, error) {
	return v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}, nil
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestPutFailureListsNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		layer   func(v1.Layer) v1.Layer
		wantErr error
	}{
		{"read error", func(l v1.Layer) v1.Layer { return brokenLayer{l} }, nil},
		{"forged blob", func(l v1.Layer) v1.Layer { return forgedLayer{l} }, ErrDigest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			good := plainLayer(t, reg("a", "a"))
			img := ociImage(t, false, good, tc.layer(plainLayer(t, reg("b", "b"))))
			_, err := s.Put(t.Context(), img, "x")
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("Put = %v, want %v", err, tc.wantErr)
			}
			if entries, err := s.List(); err != nil || len(entries) != 0 {
				t.Errorf("List = %v, %v after a failed Put", entries, err)
			}
			if s.Has(configID(t, img)) {
				t.Error("Has = true after a failed Put")
			}
			// Only the first layer, whole and verified, remains.
			d, _ := good.Digest()
			if names := dirNames(t, s.blobDir()); len(names) != 1 || names[0] != d.Hex {
				t.Errorf("blobs %q, want only %s", names, d.Hex)
			}
		})
	}
}

func TestPutCancelled(t *testing.T) {
	s := openStore(t)
	img, _ := random.Image(100, 1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Put(ctx, img, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put = %v, want %v", err, context.Canceled)
	}
	if entries, _ := s.List(); len(entries) != 0 {
		t.Errorf("List = %v", entries)
	}
}

// TestPutSweepsDeadWrites: a killed import leaves .tmp-* blob files; the
// next Put removes those no writer holds, and keeps a locked or new one.
func TestPutSweepsDeadWrites(t *testing.T) {
	s := openStore(t)
	if err := os.MkdirAll(s.blobDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	dead := filepath.Join(s.blobDir(), ".tmp-0123456789ab-1")
	live := filepath.Join(s.blobDir(), ".tmp-0123456789ab-2")
	fresh := filepath.Join(s.blobDir(), ".tmp-0123456789ab-3")
	for _, p := range []string{dead, live, fresh} {
		os.WriteFile(p, []byte("half a blob"), 0o600)
	}
	os.Chtimes(dead, old, old)
	os.Chtimes(live, old, old)
	f, err := os.Open(live)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	img, _ := random.Image(100, 1)
	if _, err := s.Put(t.Context(), img, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("dead write left: %v", err)
	}
	for _, p := range []string{live, fresh} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed under its writer: %v", filepath.Base(p), err)
		}
	}
}

func twoLayerImage(t *testing.T, gzipped bool) v1.Image {
	mk := plainLayer
	if gzipped {
		mk = gzipLayer
	}
	return ociImage(t, gzipped,
		mk(t, dir("etc/"), reg("etc/os-release", "one"), reg("etc/old", "old"), dir("tmp/").mode(0o1777), dir("opt/"), reg("opt/x", "x"), reg("suid", "x").mode(0o4755)),
		mk(t, reg("etc/os-release", "two"), reg("etc/.wh.old", ""), dir("opt/"), reg("opt/.wh..wh..opq", ""), reg("opt/y", "y")),
	)
}

func TestRootfs(t *testing.T) {
	for _, gzipped := range []bool{false, true} {
		s := openStore(t)
		img := twoLayerImage(t, gzipped)
		id, err := s.Put(t.Context(), img, "two")
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Rootfs(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if p != filepath.Join(s.dir, "unpacked", id.Encoded()) {
			t.Errorf("Rootfs = %q", p)
		}
		want := map[string]string{"etc": "dir", "etc/os-release": "file:two", "tmp": "dir", "opt": "dir", "opt/y": "file:y", "suid": "file:x"}
		if got := tree(t, p); !maps.Equal(got, want) {
			t.Errorf("gzipped %v: tree = %v, want %v", gzipped, got, want)
		}
		// Shared: no setuid bits, and no way in for other users.
		filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, _ := os.Lstat(q)
			if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
				t.Errorf("%s: mode %v", q, fi.Mode())
			}
			return nil
		})
		if fi, err := os.Stat(filepath.Dir(p)); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("rootfs directory: %v, %v", fi.Mode(), err)
		}
	}
}

func TestRootfsUnpacksOnce(t *testing.T) {
	s := openStore(t)
	id, err := s.Put(t.Context(), twoLayerImage(t, true), "")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	paths := make([]string, 8)
	errs := make([]error, 8)
	for i := range paths {
		wg.Go(func() { paths[i], errs[i] = s.Rootfs(t.Context(), id) })
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("caller %d: %q, %v; caller 0: %q", i, paths[i], errs[i], paths[0])
		}
	}
	first, _ := os.Stat(paths[0])
	// Unpacking again would lose this file.
	marker := filepath.Join(paths[0], "marker")
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := s.Rootfs(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := os.Stat(p)
	if p != paths[0] || !os.SameFile(first, again) {
		t.Errorf("second Rootfs = %q, a different tree", p)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("tree unpacked again: %v", err)
	}
	if names := dirNames(t, filepath.Dir(p)); len(names) != 3 { // <hex>, .lock, .lock-<hex>
		t.Errorf("rootfs directory holds %q", names)
	}
}

func TestRootfsSweepsStale(t *testing.T) {
	s := openStore(t)
	id, err := s.Put(t.Context(), twoLayerImage(t, false), "")
	if err != nil {
		t.Fatal(err)
	}
	// What an unpack killed midway leaves: a partial tree, its lock gone.
	stale := filepath.Join(s.rootfsDir(), ".tmp-1234")
	if err := os.MkdirAll(filepath.Join(stale, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := s.Rootfs(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if p == stale || strings.Contains(filepath.Base(p), ".tmp-") {
		t.Fatalf("Rootfs returned the stale tree %q", p)
	}
	if _, err := os.Lstat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale tree still there: %v", err)
	}
	if got := tree(t, p); got["etc/os-release"] != "file:two" {
		t.Errorf("tree = %v", got)
	}
}

func TestRootfsFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		img   func(t *testing.T) v1.Image
		check func(error) bool
	}{
		{"diff_id mismatch", func(t *testing.T) v1.Image {
			return ociImage(t, false, lyingLayer{plainLayer(t, reg("a", "a"))})
		}, func(err error) bool { return errors.Is(err, ErrDigest) }},
		{"unsafe layer", func(t *testing.T) v1.Image {
			return ociImage(t, true, gzipLayer(t, reg("ok", "x")), gzipLayer(t, sym("l", "/etc"), reg("l/passwd", "x")))
		}, func(err error) bool { return errors.Is(err, ErrUnsafeLayer) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			id, err := s.Put(t.Context(), tc.img(t), "")
			if err != nil {
				t.Fatal(err)
			}
			p, err := s.Rootfs(t.Context(), id)
			if !tc.check(err) {
				t.Fatalf("Rootfs = %q, %v", p, err)
			}
			for _, n := range dirNames(t, s.rootfsDir()) {
				if !strings.HasPrefix(n, ".lock") {
					t.Errorf("left behind: %s", n)
				}
			}
		})
	}
	s := openStore(t)
	if _, err := s.Rootfs(t.Context(), digest.FromString("x")); !errdefs.IsNotFound(err) {
		t.Errorf("Rootfs(unknown) = %v, want not found", err)
	}
	if _, err := s.Rootfs(t.Context(), "sha256:.."); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Rootfs(bad id) = %v, want invalid argument", err)
	}
}

func TestImageChecksBlobs(t *testing.T) {
	s := openStore(t)
	img := twoLayerImage(t, false)
	id, err := s.Put(t.Context(), img, "")
	if err != nil {
		t.Fatal(err)
	}
	// Someone with write access to the store edits the config.
	p := filepath.Join(s.blobDir(), id.Encoded())
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(`{"rootfs":{"type":"layers","diff_ids":[]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Image(id); !errors.Is(err, ErrDigest) {
		t.Errorf("Image = %v, want %v", err, ErrDigest)
	}
	if _, err := s.Config(id); !errors.Is(err, ErrDigest) {
		t.Errorf("Config = %v, want %v", err, ErrDigest)
	}
	if _, err := s.Rootfs(t.Context(), id); !errors.Is(err, ErrDigest) {
		t.Errorf("Rootfs = %v, want %v", err, ErrDigest)
	}
}

// TestRemove: removing one of two images that share a layer frees its own
// blobs and tree, keeps the shared layer and the other image whole, and is
// refused while a run holds the tree.
func TestRemove(t *testing.T) {
	s := openStore(t)
	shared := plainLayer(t, reg("etc/os-release", "shared"))
	a := ociImage(t, false, shared, plainLayer(t, reg("a", "only in a")))
	b := ociImage(t, false, shared, plainLayer(t, reg("b", "only in b")))
	idA, err := s.Put(t.Context(), a, "a")
	if err != nil {
		t.Fatal(err)
	}
	idB, err := s.Put(t.Context(), b, "b")
	if err != nil {
		t.Fatal(err)
	}
	rootA, release, err := s.Use(t.Context(), idA)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(t.Context(), idA); !errors.Is(err, ErrInUse) || !errdefs.IsConflict(err) {
		t.Fatalf("Remove while in use = %v, want ErrInUse", err)
	}
	release()
	freed, err := s.Remove(t.Context(), idA)
	if err != nil {
		t.Fatal(err)
	}
	// a's manifest, config and own layer go; the shared layer stays.
	if freed.Blobs != 3 || !freed.Rootfs {
		t.Errorf("freed %+v, want 3 blobs and the tree", freed)
	}
	if s.Has(idA) {
		t.Error("a is still listed")
	}
	if _, err := os.Stat(rootA); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a's tree is still there: %v", err)
	}
	if _, err := s.Image(idB); err != nil {
		t.Fatalf("b was damaged: %v", err)
	}
	rootB, err := s.Rootfs(t.Context(), idB)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(rootB, "etc/os-release")); string(got) != "shared" {
		t.Errorf("b's shared layer: %q", got)
	}
	if _, err := s.Remove(t.Context(), idA); !errdefs.IsNotFound(err) {
		t.Errorf("second Remove = %v, want not found", err)
	}
}

// TestStageCommitUndo: a staged image is not listed until Commit, and undo
// puts the index back as it was, the entry the image replaced included.
func TestStageCommitUndo(t *testing.T) {
	ctx := t.Context()
	s := openStore(t)
	old, _ := random.Image(100, 1)
	oldID, err := s.Put(ctx, old, "team/py")
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(s.indexPath())

	img, _ := random.Image(100, 2)
	st, err := s.Stage(ctx, img, "team/py")
	if err != nil {
		t.Fatal(err)
	}
	if s.Has(st.ID) {
		t.Fatal("a staged image is listed before Commit")
	}
	undo, err := st.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Has(st.ID) || s.Has(oldID) {
		t.Fatalf("after Commit: new listed %v, replaced one listed %v", s.Has(st.ID), s.Has(oldID))
	}
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Has(st.ID) || !s.Has(oldID) {
		t.Errorf("after undo: new listed %v, replaced one listed %v", s.Has(st.ID), s.Has(oldID))
	}
	var b, a ocispec.Index
	json.Unmarshal(before, &b)
	after, _ := os.ReadFile(s.indexPath())
	json.Unmarshal(after, &a)
	if len(a.Manifests) != 1 || len(b.Manifests) != 1 || a.Manifests[0].Digest != b.Manifests[0].Digest {
		t.Errorf("index after undo %s, before %s", after, before)
	}

	// Staged and given up: never listed, and its blobs are collected.
	third, _ := random.Image(100, 1)
	st, err = s.Stage(ctx, third, "other")
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	st.Close()
	if s.Has(st.ID) {
		t.Error("a staged image given up is listed")
	}
	// Committing an image already listed as it is changes nothing, and its
	// undo keeps it.
	st, err = s.Stage(ctx, old, "team/py")
	if err != nil {
		t.Fatal(err)
	}
	undo, err = st.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := undo(ctx); err != nil || !s.Has(oldID) {
		t.Errorf("undo of a no-op Commit: %v; listed %v", err, s.Has(oldID))
	}
}
