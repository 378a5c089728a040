package images

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/airlock-sandbox/airlock/store"
)

// manifestBlob is the path of the one manifest a layout directory's
// index.json names.
func manifestBlob(t *testing.T, dir string) string {
	t.Helper()
	var idx v1.IndexManifest
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err == nil {
		err = json.Unmarshal(b, &idx)
	}
	if err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("reading the index: %v (%d manifests)", err, len(idx.Manifests))
	}
	h := idx.Manifests[0].Digest
	return filepath.Join(dir, "blobs", h.Algorithm, h.Hex)
}

// swap replaces the file p with what mk makes there, and returns p.
func swap(t *testing.T, p string, mk func(string) error) string {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := mk(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLayoutDirHostileFiles: a layout directory is read under the rules a
// layout tar is: an index.json that is a symlink (to /dev/zero) or a FIFO,
// a symlinked blobs directory, or a sparse 64 GiB manifest blob is refused,
// promptly, naming the file and the rule, and nothing is left behind.
func TestLayoutDirHostileFiles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, dir string) string // returns the file to name
		rule  string
	}{
		{"index.json a symlink to /dev/zero", func(t *testing.T, dir string) string {
			return swap(t, filepath.Join(dir, "index.json"), func(p string) error { return os.Symlink("/dev/zero", p) })
		}, "is a symlink"},
		{"index.json a FIFO", func(t *testing.T, dir string) string {
			return swap(t, filepath.Join(dir, "index.json"), func(p string) error { return syscall.Mkfifo(p, 0o644) })
		}, "is a FIFO"},
		{"blobs/sha256 a symlink", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "blobs", "sha256")
			if err := os.Rename(p, filepath.Join(dir, "elsewhere")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../elsewhere", p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "is a symlink"},
		{"a sparse 64 GiB manifest blob", func(t *testing.T, dir string) string {
			p := manifestBlob(t, dir)
			if err := os.Truncate(p, 64<<30); err != nil {
				t.Fatal(err)
			}
			return p
		}, "the cap on one layer (--max-layer-size)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := testLayout(t, tar.Header{Typeflag: tar.TypeReg, Name: "etc/hello", Size: 3})
			file := tc.spoil(t, dir)
			done := make(chan error, 1)
			go func() { done <- importLeavingNothing(t, dir, Limits{}) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the import is still running after 20s")
			}
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), fmt.Sprintf("%q", file)) || !strings.Contains(err.Error(), tc.rule) {
				t.Fatalf("got %v, want invalid input naming %q and %q", err, file, tc.rule)
			}
			t.Log(err)
		})
	}
}

// TestImportConfigCap: a config over store.MaxConfig, which the store
// would not read back whole, is refused at import from every form, as
// invalid input naming its size and the cap, before anything is staged.
func TestImportConfigCap(t *testing.T) {
	img := imageOf(t, types.OCILayer, compressedLayer(t, zerosTar(t, 3, 3), compression.GZip, types.OCILayer))
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.Env = []string{"BIG=" + strings.Repeat("x", int(store.MaxConfig))}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	want := "over the " + store.MaxConfig.String() + " cap"
	refusedFromEachForm(t, img, func(t *testing.T, err error) {
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want %q", err, want)
		}
	})
}

// refusedFromEachForm imports img from a layout directory, a layout tar
// and a docker save archive, and passes check each refusal, which must be
// invalid input that leaves nothing behind.
func refusedFromEachForm(t *testing.T, img v1.Image, check func(*testing.T, error)) {
	for name, form := range map[string]func(*testing.T, v1.Image) string{"layout": layoutDir, "layout tar": layoutTar, "docker save": dockerSave} {
		t.Run(name, func(t *testing.T) {
			err := importLeavingNothing(t, form(t, img), Limits{})
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("got %v, want invalid input", err)
			}
			check(t, err)
			t.Log(err)
		})
	}
}

// TestImportLayerCount: an image of more than MaxLayers layers is refused
// from every form, naming the count and the cap, before its layers are
// read: a docker save archive costs time that grows with the square of
// its layer count.
func TestImportLayerCount(t *testing.T) {
	l := compressedLayer(t, zerosTar(t, 1, 1), compression.GZip, types.OCILayer)
	adds := make([]mutate.Addendum, MaxLayers+1)
	for i := range adds {
		adds[i] = mutate.Addendum{Layer: l, MediaType: types.OCILayer}
	}
	img, err := mutate.Append(imageOf(t, types.OCILayer), adds...)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d layers, over the cap of %d", MaxLayers+1, MaxLayers)
	refusedFromEachForm(t, img, func(t *testing.T, err error) {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want %q", err, want)
		}
	})
}

// TestImportLayoutTarErrors: a layout tar with an entry twice is invalid
// input naming the entry, not a missing file; a failure to unpack it for
// want of a temporary directory is unavailable.
func TestImportLayoutTarErrors(t *testing.T) {
	dir := testLayout(t, tar.Header{Typeflag: tar.TypeReg, Name: "etc/hello", Size: 3})
	archive := filepath.Join(t.TempDir(), "twice.tar")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	idx, _ := os.ReadFile(filepath.Join(dir, "index.json"))
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "index.json", Mode: 0o644, Size: int64(len(idx))})
	tw.Write(idx)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	err = importLeavingNothing(t, archive, Limits{})
	if !errdefs.IsInvalidArgument(err) || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), `entry "index.json" appears twice`) {
		t.Errorf("an entry twice: got %v, want invalid input naming the entry", err)
	}

	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "gone"))
	_, err = Import(t.Context(), layoutTar(t, imageOf(t, types.OCILayer)), ImportOptions{Root: t.TempDir(), Loader: &fakeDocker{}})
	if !errdefs.IsUnavailable(err) || errdefs.IsNotFound(err) {
		t.Errorf("no temporary directory: got %v, want unavailable", err)
	}
}
