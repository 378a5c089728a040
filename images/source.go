package images

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/airlock-sandbox/airlock/store"
	"github.com/airlock-sandbox/airlock/units"
)

// ErrFormat is wrapped when a file is not an image airlock can read.
var ErrFormat = errors.New("unrecognised image format")

// ErrNotRequired is wrapped when an archive does not hold the image a
// caller required by ID.
var ErrNotRequired = errors.New("the archive does not hold the required image")

// Source is an image read from disk, not yet verified.
type Source struct {
	Image v1.Image
	// Manifest is the manifest descriptor from an OCI index; nil for a
	// docker save archive, which has no manifest blob.
	Manifest *v1.Descriptor
	// Name is the image name the archive suggests, if any.
	Name string
	// Format is "oci-layout" or "docker-archive".
	Format string

	cleanup func()
}

// Close removes anything Open unpacked.
func (s *Source) Close() error {
	if s.cleanup != nil {
		s.cleanup()
	}
	return nil
}

// Open reads an OCI image layout (a directory or a tar of one) or a
// `docker save` archive. The layout or archive must hold exactly one image
// for this machine's platform. ctx ends the unpacking of a layout tar.
func Open(ctx context.Context, path string) (*Source, error) {
	return OpenImage(ctx, path, "")
}

// OpenImage is Open, except that when id is not empty, an OCI layout may
// hold several images and the one whose manifest names config id is
// chosen. The choice is by what the manifest claims: Verify then computes
// the real ID, which the caller must compare with id.
func OpenImage(ctx context.Context, path string, id digest.Digest) (*Source, error) {
	return openImage(ctx, path, id, Limits{})
}

// openImage is OpenImage, copying a layout directory under lim's caps.
func openImage(ctx context.Context, path string, id digest.Digest, lim Limits) (*Source, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("opening image %q: %w", path, err)
	}
	var kind string
	if fi.IsDir() {
		if _, err := os.Lstat(filepath.Join(path, ocispec.ImageLayoutFile)); err != nil {
			return nil, fmt.Errorf("%w: directory %q has no %s file; give an OCI image layout, a tar of one, or a `docker save` archive", ErrFormat, path, ocispec.ImageLayoutFile)
		}
	} else if kind, err = sniffTar(path); err != nil {
		return nil, err
	}
	switch {
	case fi.IsDir() || kind == "oci-layout":
		// Either way the layout is read from a private copy: go-containerregistry
		// reads its files whole, through symlinks, and would block on a FIFO.
		dir, err := os.MkdirTemp("", "airlock-layout-")
		if err != nil {
			// %v: a missing TMPDIR is no missing image.
			return nil, fmt.Errorf("making a directory to unpack %q into: %v", path, err)
		}
		done := func() { os.RemoveAll(dir) }
		if fi.IsDir() {
			err = copyLayout(ctx, path, dir, lim)
		} else {
			err = extractLayout(ctx, path, dir)
		}
		if err != nil {
			done()
			return nil, err
		}
		return openLayout(ctx, dir, id, done)
	default:
		if err := storedWhole(ctx, path); err != nil {
			return nil, err
		}
		img, err := tarball.ImageFromPath(path, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: reading docker archive %q: %v", ErrFormat, path, err)
		}
		return &Source{Image: img, Format: "docker-archive"}, nil
	}
}

// sniffTar tells an OCI layout tar from a docker save archive by its entries.
func sniffTar(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("opening image %q: %w", path, err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var manifest bool
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("%w: %q is not a tar archive (%v); give an OCI image layout or a `docker save` archive", ErrFormat, path, err)
		}
		switch filepath.Clean(h.Name) {
		case ocispec.ImageLayoutFile:
			return "oci-layout", nil
		case "manifest.json":
			manifest = true
		}
	}
	if manifest {
		return "docker-archive", nil
	}
	return "", fmt.Errorf("%w: %q has neither an oci-layout nor a manifest.json entry", ErrFormat, path)
}

var layoutName = regexp.MustCompile(`^(oci-layout|index\.json|blobs/[a-z0-9]+/[a-f0-9]{32,128})$`)

// The parts of a blob's name in a layout.
var (
	blobAlg  = regexp.MustCompile(`^[a-z0-9]+$`)
	blobName = regexp.MustCompile(`^[a-f0-9]{32,128}$`)
)

// extractLayout copies the layout's own files from a tar into dir. Any
// other name (manifest.json and repositories from newer docker save
// archives included) is skipped, so nothing lands outside dir.
func extractLayout(ctx context.Context, path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening image %q: %w", path, err)
	}
	defer f.Close()
	st := newStored(f, path)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return eachEntry(ctx, f, path, func(h *tar.Header, tr *tar.Reader) error {
		name := filepath.ToSlash(filepath.Clean(h.Name))
		if h.Typeflag != tar.TypeReg || !layoutName.MatchString(name) {
			return nil
		}
		// A sparse entry would be written out in full before any digest
		// is checked.
		if err := st.take(h); err != nil {
			return err
		}
		if err := root.MkdirAll(filepath.Dir(name), 0o700); err != nil {
			return fmt.Errorf("unpacking %q: %w", name, err)
		}
		out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %q: entry %q appears twice", ErrFormat, path, name)
		}
		if err != nil {
			return fmt.Errorf("unpacking %q: %w", name, err)
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("unpacking %q: %w", name, err)
		}
		return nil
	})
}

// eachEntry calls fn for each entry of the tar in r (path names it in
// errors) until fn fails, the tar ends, or ctx is done.
func eachEntry(ctx context.Context, r io.Reader, path string, fn func(*tar.Header, *tar.Reader) error) error {
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: reading %q: %v", ErrFormat, path, err)
		}
		if err := fn(h, tr); err != nil {
			return err
		}
	}
}

func openLayout(ctx context.Context, dir string, id digest.Digest, cleanup func()) (*Source, error) {
	fail := func(err error) (*Source, error) {
		if cleanup != nil {
			cleanup()
		}
		return nil, err
	}
	if fi, err := os.Lstat(filepath.Join(dir, "index.json")); err == nil && fi.Size() > int64(maxLayoutJSON) {
		return fail(fmt.Errorf("%w: index.json is %d bytes, over the %s cap", errFixedCap, fi.Size(), maxLayoutJSON))
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return fail(fmt.Errorf("%w: reading OCI layout: %v", ErrFormat, err))
	}
	var found []v1.Descriptor
	var images []v1.Image
	w := &indexWalk{ctx: ctx, dir: dir, seen: map[v1.Hash]bool{}}
	if err := w.collect(idx, &found, &images, 0); err != nil {
		return fail(err)
	}
	if id != "" && len(images) > 1 {
		var keep []int
		for i, img := range images {
			if cfg, err := img.ConfigName(); err == nil && cfg.String() == id.String() {
				keep = append(keep, i)
			}
		}
		if len(keep) == 0 {
			return fail(fmt.Errorf("%w: none of the %d images in the OCI layout is %s", ErrNotRequired, len(images), id))
		}
		found, images = []v1.Descriptor{found[keep[0]]}, []v1.Image{images[keep[0]]}
	}
	switch len(images) {
	case 1:
	case 0:
		return fail(fmt.Errorf("%w: the OCI layout holds no image for %s/%s", ErrFormat, runtime.GOOS, runtime.GOARCH))
	default:
		return fail(fmt.Errorf("%w: the OCI layout holds %d images for %s/%s; export one image per layout, or choose one with --require-digest", ErrFormat, len(images), runtime.GOOS, runtime.GOARCH))
	}
	d := found[0]
	// The reader reads the config whole too: refuse it first if it is
	// larger than any the store reads (Verify checks the bytes).
	m, err := images[0].Manifest()
	if err != nil {
		return fail(fmt.Errorf("%w: reading manifest %s: %v", ErrFormat, d.Digest, err))
	}
	if err := w.small(m.Config, "config", store.MaxConfig); err != nil {
		return fail(err)
	}
	return &Source{
		Image:    images[0],
		Manifest: &d,
		Name:     d.Annotations[ocispec.AnnotationRefName],
		Format:   "oci-layout",
		cleanup:  cleanup,
	}, nil
}

// maxDescriptors bounds the descriptors a layout's indexes may hold in
// all: nested indexes naming each other many times over would otherwise
// cost work that grows with the product of their sizes.
const maxDescriptors = 4096

// indexWalk walks a layout's indexes, each digest once.
type indexWalk struct {
	ctx  context.Context
	dir  string // the layout, a private copy
	seen map[v1.Hash]bool
	n    int
}

// small refuses the blob d names if the descriptor or the file is larger
// than max: the layout reader reads such a blob whole before it compares
// the size.
func (w *indexWalk) small(d v1.Descriptor, what string, limit units.Bytes) error {
	size := d.Size
	if blobAlg.MatchString(d.Digest.Algorithm) && blobName.MatchString(d.Digest.Hex) {
		if fi, err := os.Lstat(filepath.Join(w.dir, "blobs", d.Digest.Algorithm, d.Digest.Hex)); err == nil {
			size = max(size, fi.Size())
		}
	}
	if size > int64(limit) {
		return fmt.Errorf("%w: %s %s is %d bytes, over the %s cap", errFixedCap, what, d.Digest, size, limit)
	}
	return nil
}

// collect walks an index, keeping images for this platform (or with no
// platform given) and descending into nested indexes.
func (w *indexWalk) collect(idx v1.ImageIndex, found *[]v1.Descriptor, images *[]v1.Image, depth int) error {
	if depth > 4 {
		return fmt.Errorf("%w: image indexes nested too deep", ErrFormat)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return fmt.Errorf("%w: reading index: %v", ErrFormat, err)
	}
	for _, d := range m.Manifests {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		if w.n++; w.n > maxDescriptors {
			return fmt.Errorf("%w: the OCI layout's indexes name more than %d manifests", ErrFormat, maxDescriptors)
		}
		if w.seen[d.Digest] {
			continue
		}
		w.seen[d.Digest] = true
		if p := d.Platform; p != nil && (p.OS != runtime.GOOS || p.Architecture != runtime.GOARCH) {
			continue
		}
		switch d.MediaType {
		case types.OCIImageIndex, types.DockerManifestList:
			if err := w.small(d, "index", maxLayoutJSON); err != nil {
				return err
			}
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return fmt.Errorf("%w: reading index %s: %v", ErrFormat, d.Digest, err)
			}
			if err := w.collect(child, found, images, depth+1); err != nil {
				return err
			}
		case types.OCIManifestSchema1, types.DockerManifestSchema2:
			if err := w.small(d, "manifest", maxLayoutJSON); err != nil {
				return err
			}
			img, err := idx.Image(d.Digest)
			if err != nil {
				return fmt.Errorf("%w: reading image %s: %v", ErrFormat, d.Digest, err)
			}
			*found = append(*found, d)
			*images = append(*images, img)
		}
	}
	return nil
}

// storedWhole refuses a tar whose regular entries claim more bytes than
// the archive holds (see stored).
func storedWhole(ctx context.Context, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening image %q: %w", path, err)
	}
	defer f.Close()
	st := newStored(f, path)
	return eachEntry(ctx, f, path, func(h *tar.Header, _ *tar.Reader) error {
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		return st.take(h)
	})
}

// stored counts what a tar's regular entries claim against the archive's
// size: stored whole, together they hold no more than it. A sparse entry,
// which archive/tar presents as a file of its full size, claims more, and
// a reader of it would inflate it in full.
type stored struct {
	path string
	left int64 // -1: not a regular file, nothing to count against
}

func newStored(f *os.File, path string) *stored {
	st := &stored{path: path, left: -1}
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		st.left = fi.Size()
	}
	return st
}

// take counts h, a regular entry, or refuses it.
func (st *stored) take(h *tar.Header) error {
	if st.left < 0 {
		return nil
	}
	if h.Size > st.left {
		return fmt.Errorf("%w: %q: entry %q claims %d bytes, more than the archive holds (a sparse entry): an image archive stores every byte", ErrFormat, st.path, h.Name, h.Size)
	}
	st.left -= h.Size
	return nil
}
