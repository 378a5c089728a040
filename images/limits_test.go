package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// zerosTar is a tar stream of one file claiming size bytes and holding
// the first n of them, all zero; n < size leaves the tar unfinished.
func zerosTar(t *testing.T, size, n int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "zeros", Mode: 0o644, Size: size}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	if n == size {
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// compressedLayer compresses the tar stream b with c, as a layer of media
// type mt.
func compressedLayer(t *testing.T, b []byte, c compression.Compression, mt types.MediaType) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithCompression(c), tarball.WithMediaType(mt))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// imageOf is an OCI image of the layers, each of media type mt.
func imageOf(t *testing.T, mt types.MediaType, layers ...v1.Layer) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	for _, l := range layers {
		var err error
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l, MediaType: mt}); err != nil {
			t.Fatal(err)
		}
	}
	return img
}

// layoutDir writes img as an OCI layout directory.
func layoutDir(t *testing.T, img v1.Image) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}

// layoutTar writes img as a tar of an OCI layout.
func layoutTar(t *testing.T, img v1.Image) string {
	t.Helper()
	dir := layoutDir(t, img)
	path := filepath.Join(t.TempDir(), "layout.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// dockerSave writes img as a docker save archive.
func dockerSave(t *testing.T, img v1.Image) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "save.tar")
	if err := tarball.WriteToFile(path, name.MustParseReference("t/bomb:latest"), img); err != nil {
		t.Fatal(err)
	}
	return path
}

// importLeavingNothing imports path under lim, and fails the test unless
// the import left nothing on disk: not in airlock's root, not in the
// temporary directory (where a layout tar is unpacked), not in dockerd.
func importLeavingNothing(t *testing.T, path string, lim Limits) error {
	t.Helper()
	root, tmp := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", tmp)
	d := &fakeDocker{}
	_, err := Import(t.Context(), path, ImportOptions{Root: root, Name: "t/bomb", Limits: lim, Loader: d})
	for _, dir := range []string{root, tmp} {
		var left []string
		filepath.WalkDir(dir, func(p string, _ fs.DirEntry, _ error) error {
			if p != dir {
				left = append(left, p)
			}
			return nil
		})
		if len(left) != 0 {
			t.Errorf("a refused import left %v", left)
		}
	}
	if len(d.loaded) != 0 {
		t.Errorf("a refused import loaded %v into dockerd", d.loaded)
	}
	return err
}

// TestImportSizeCaps: gzip and zstd layers of zeros, a few KiB stored,
// that hold more than a cap uncompressed are refused, from an OCI layout,
// a tar of one and a docker save archive, as invalid input that names the
// layer, the cap and the flag that raises it; nothing is left behind. The
// same images import under caps they fit.
func TestImportSizeCaps(t *testing.T) {
	const MiB = 1 << 20
	big := zerosTar(t, 4*MiB, 4*MiB)
	half := zerosTar(t, 600<<10, 600<<10)
	gz := compressedLayer(t, big, compression.GZip, types.OCILayer)
	zst := compressedLayer(t, big, compression.ZStd, types.OCILayerZStd)
	gzHalf := compressedLayer(t, half, compression.GZip, types.OCILayer)
	zstHalf := compressedLayer(t, half, compression.ZStd, types.OCILayerZStd)
	for _, tc := range []struct {
		name string
		path func(*testing.T) string
		lim  Limits
		// layer is the refused layer's number; flag and cap, the cap it
		// passed. 0: the import succeeds.
		layer     int
		flag, cap string
	}{
		{"gzip layer, layout", func(t *testing.T) string { return layoutDir(t, imageOf(t, types.OCILayer, gz)) },
			Limits{Layer: 1 * MiB}, 1, "--max-layer-size", "1MiB"},
		{"zstd layer, layout tar", func(t *testing.T) string { return layoutTar(t, imageOf(t, types.OCILayerZStd, zst)) },
			Limits{Layer: 1 * MiB}, 1, "--max-layer-size", "1MiB"},
		{"gzip layer, docker save", func(t *testing.T) string { return dockerSave(t, imageOf(t, types.OCILayer, gz)) },
			Limits{Layer: 1 * MiB}, 1, "--max-layer-size", "1MiB"},
		{"image over its cap at the second layer, layout tar", func(t *testing.T) string {
			return layoutTar(t, imageOf(t, types.OCILayer, gzHalf, gzHalf))
		}, Limits{Layer: 1 * MiB, Image: 1 * MiB}, 2, "--max-image-size", "1MiB"},
		{"image over its cap at the second layer, zstd, docker save", func(t *testing.T) string {
			return dockerSave(t, imageOf(t, types.OCILayerZStd, zstHalf, zstHalf))
		}, Limits{Layer: 1 * MiB, Image: 1 * MiB}, 2, "--max-image-size", "1MiB"},
		{"gzip layer under the caps", func(t *testing.T) string { return layoutTar(t, imageOf(t, types.OCILayer, gz)) },
			Limits{Layer: 5 * MiB, Image: 5 * MiB}, 0, "", ""},
		{"zstd layers under the caps", func(t *testing.T) string { return layoutDir(t, imageOf(t, types.OCILayerZStd, zstHalf, zstHalf)) },
			Limits{Layer: 1 * MiB, Image: 2 * MiB}, 0, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path(t)
			if tc.layer == 0 {
				if _, err := Import(t.Context(), path, ImportOptions{Root: t.TempDir(), Limits: tc.lim, Loader: &fakeDocker{}}); err != nil {
					t.Fatal(err)
				}
				return
			}
			src, err := Open(t.Context(), path)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := src.Image.ConfigFile()
			src.Close()
			if err != nil {
				t.Fatal(err)
			}
			diffID := cfg.RootFS.DiffIDs[tc.layer-1].String()
			err = importLeavingNothing(t, path, tc.lim)
			if !errdefs.IsInvalidArgument(err) || !errors.Is(err, ErrTooLarge) {
				t.Fatalf("got %v, want invalid input wrapping ErrTooLarge", err)
			}
			for _, want := range []string{diffID, tc.cap, tc.flag, "nothing was imported"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal does not name %q: %v", want, err)
				}
			}
			t.Log(err)
		})
	}
}

// TestLayerCapStopsTheStream: a layer is refused as soon as its
// uncompressed bytes pass the cap, not at its end. Each layer is 2 MiB of
// zeros, gzip or zstd, then bytes that are no compressed stream at all;
// a reader that went on past the 1 MiB cap would fail on those instead.
func TestLayerCapStopsTheStream(t *testing.T) {
	const MiB = 1 << 20
	head := zerosTar(t, 1<<40, 2*MiB) // a header claiming 1 TiB, then 2 MiB of it
	for _, tc := range []struct {
		name string
		c    compression.Compression
		mt   types.MediaType
	}{
		{"gzip", compression.GZip, types.OCILayer},
		{"zstd", compression.ZStd, types.OCILayerZStd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := compressedLayer(t, head, tc.c, tc.mt).Compressed()
			if err != nil {
				t.Fatal(err)
			}
			blob, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			blob = append(blob, bytes.Repeat([]byte("not a compressed stream "), 64)...)
			// A static layer's diff_id is its blob's digest, which the
			// uncompressed bytes never match: the cap must come first.
			path := layoutDir(t, imageOf(t, tc.mt, static.NewLayer(blob, tc.mt)))
			if err := importLeavingNothing(t, path, Limits{Layer: MiB}); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("got %v, want ErrTooLarge before the end of the stream", err)
			}
		})
	}
}
