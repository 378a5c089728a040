package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/units"
	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
)

// AnnotationImageID is the index.json annotation that carries an image's ID.
const AnnotationImageID = "dev.airlock.image.id"

// Store is an image store rooted at one directory. Its methods are safe for
// concurrent use, by goroutines and by processes.
type Store struct {
	dir string
}

// Entry is one image listed in the store.
type Entry struct {
	// Name is a label for people; it may be empty.
	Name string
	// ID is the sha256 of the image's config blob.
	ID digest.Digest
	// Manifest is the digest of the image's manifest blob.
	Manifest digest.Digest
}

// layerTypes are the layer media types Rootfs can unpack.
var layerTypes = []types.MediaType{
	types.OCIUncompressedLayer,
	types.OCILayer,
	types.OCILayerZStd,
	types.DockerLayer,
	types.DockerUncompressedLayer,
}

// Open uses dir (usually <root>/store) for the store, creating it if
// missing.
func Open(dir string) (*Store, error) {
	s := &Store{dir: dir}
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		{dir, 0o700},
		{s.blobDir(), 0o755},
		// Nobody but the store's owner reaches an unpacked tree, whatever
		// owners and modes the image gave its files.
		{s.rootfsDir(), 0o700},
	} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return nil, fmt.Errorf("opening image store: %w", err)
		}
	}
	if err := os.Chmod(s.rootfsDir(), 0o700); err != nil {
		return nil, fmt.Errorf("opening image store: %w", err)
	}
	// Trees unpacked by an earlier layout took group and other write bits
	// away, which a runtime copies onto tmpfs mount points (/tmp 1755).
	os.RemoveAll(filepath.Join(dir, "rootfs"))
	layoutFile, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return nil, err
	}
	empty, err := json.Marshal(newIndex())
	if err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{
		ocispec.ImageLayoutFile: layoutFile,
		ocispec.ImageIndexFile:  empty,
	} {
		if err := createOnce(filepath.Join(dir, "oci", name), append(data, '\n')); err != nil {
			return nil, fmt.Errorf("opening image store: %w", err)
		}
	}
	return s, nil
}

func (s *Store) ociDir() string    { return filepath.Join(s.dir, "oci") }
func (s *Store) indexPath() string { return filepath.Join(s.ociDir(), ocispec.ImageIndexFile) }

// Put writes img into the store under name and lists it, and returns its
// ID: Stage, then Commit.
func (s *Store) Put(ctx context.Context, img v1.Image, name string) (digest.Digest, error) {
	st, err := s.Stage(ctx, img, name)
	if err != nil {
		return "", err
	}
	defer st.Close()
	if _, err := st.Commit(ctx); err != nil {
		return "", err
	}
	return st.ID, nil
}

// Staged is an image whose blobs are all in the store but which is not
// listed yet, so that nothing can run it. Until Commit or Close it holds
// the store's put lock shared, so its blobs are not collected as unused.
type Staged struct {
	// ID is the image's ID.
	ID    digest.Digest
	s     *Store
	desc  ocispec.Descriptor
	unput func()
}

// Close gives up a staged image that was not committed; its blobs are
// collected by a later Remove. It is safe to call more than once.
func (st *Staged) Close() {
	if st.unput != nil {
		st.unput()
		st.unput = nil
	}
}

// Commit lists the staged image in index.json. undo takes it out again and
// puts back what it replaced, for an import that fails after this step.
func (st *Staged) Commit(ctx context.Context) (undo func(context.Context) error, err error) {
	defer st.Close()
	replaced, added, err := st.s.addToIndex(ctx, st.desc)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		if !added {
			return nil
		}
		return st.s.restoreIndex(ctx, st.desc, replaced)
	}, nil
}

// Stage writes img's blobs into the store under name without listing it.
// Every blob is checked against the manifest while it is written. Staging
// an image again is cheap: blobs already present are skipped.
func (s *Store) Stage(ctx context.Context, img v1.Image, name string) (*Staged, error) {
	s.sweepBlobs()
	unput, err := lock(ctx, s.putLock(), unix.LOCK_SH)
	if err != nil {
		return nil, fmt.Errorf("locking image store: %w", err)
	}
	st := &Staged{s: s, unput: unput}
	desc, err := s.stage(ctx, img, name)
	if err != nil {
		st.Close()
		return nil, err
	}
	st.desc = desc
	st.ID = digest.Digest(desc.Annotations[AnnotationImageID])
	return st, nil
}

func (s *Store) stage(ctx context.Context, img v1.Image, name string) (ocispec.Descriptor, error) {
	fail := func(err error) (ocispec.Descriptor, error) { return ocispec.Descriptor{}, err }
	mt, err := img.MediaType()
	if err != nil {
		return fail(fmt.Errorf("reading manifest: %w", err))
	}
	if mt != types.OCIManifestSchema1 && mt != types.DockerManifestSchema2 {
		return fail(fmt.Errorf("%w: manifest media type %q is not an image manifest", errdefs.ErrInvalidArgument, mt))
	}
	raw, err := img.RawManifest()
	if err != nil {
		return fail(fmt.Errorf("reading manifest: %w", err))
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return fail(fmt.Errorf("%w: parsing manifest: %v", errdefs.ErrInvalidArgument, err))
	}
	id, err := toDigest(m.Config.Digest)
	if err != nil {
		return fail(fmt.Errorf("image config: %w", err))
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return fail(fmt.Errorf("reading config: %w", err))
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(rawCfg))
	if err != nil {
		return fail(fmt.Errorf("%w: parsing config: %v", errdefs.ErrInvalidArgument, err))
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return fail(fmt.Errorf("%w: %d layers but %d diff_ids in the config", ErrDigest, len(m.Layers), len(cfg.RootFS.DiffIDs)))
	}

	// Layers, then config, then manifest: a manifest blob in place means
	// everything it names is too.
	for i, desc := range m.Layers {
		if !slices.Contains(layerTypes, desc.MediaType) {
			return fail(fmt.Errorf("%w: layer %d has media type %q, which airlock cannot unpack", errdefs.ErrInvalidArgument, i+1, desc.MediaType))
		}
		d, err := toDigest(desc.Digest)
		if err != nil {
			return fail(fmt.Errorf("layer %d: %w", i+1, err))
		}
		l, err := img.LayerByDigest(desc.Digest)
		if err != nil {
			return fail(fmt.Errorf("reading layer %d: %w", i+1, err))
		}
		rc, err := l.Compressed()
		if err != nil {
			return fail(fmt.Errorf("reading layer %d: %w", i+1, err))
		}
		err = s.writeBlob(ctx, rc, d, desc.Size)
		rc.Close()
		if err != nil {
			return fail(fmt.Errorf("layer %d: %w", i+1, err))
		}
	}
	if err := s.writeBlob(ctx, bytes.NewReader(rawCfg), id, m.Config.Size); err != nil {
		return fail(fmt.Errorf("config: %w", err))
	}
	manifest := digest.FromBytes(raw)
	if err := s.writeBlob(ctx, bytes.NewReader(raw), manifest, int64(len(raw))); err != nil {
		return fail(fmt.Errorf("manifest: %w", err))
	}
	syncDir(s.blobDir())

	desc := ocispec.Descriptor{
		MediaType:   string(mt),
		Digest:      manifest,
		Size:        int64(len(raw)),
		Annotations: map[string]string{AnnotationImageID: id.String()},
	}
	if name != "" {
		desc.Annotations[ocispec.AnnotationRefName] = name
	}
	if cfg.OS != "" {
		desc.Platform = &ocispec.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant, OSVersion: cfg.OSVersion}
	}
	return desc, nil
}

// addToIndex lists desc in index.json. A name names one image, so an entry
// with the same name is replaced, as is an unnamed entry for the same image;
// an unnamed image already listed is left as it is. It returns the entries
// it replaced, and whether it changed anything.
func (s *Store) addToIndex(ctx context.Context, desc ocispec.Descriptor) (replaced []ocispec.Descriptor, added bool, err error) {
	err = s.rewriteIndex(ctx, func(idx *ocispec.Index) bool {
		name, id := desc.Annotations[ocispec.AnnotationRefName], desc.Annotations[AnnotationImageID]
		for _, d := range idx.Manifests {
			sameID := d.Annotations[AnnotationImageID] == id
			if sameID && d.Digest == desc.Digest && d.Annotations[ocispec.AnnotationRefName] == name {
				return false
			}
			if sameID && name == "" {
				return false
			}
		}
		idx.Manifests = slices.DeleteFunc(idx.Manifests, func(d ocispec.Descriptor) bool {
			dname := d.Annotations[ocispec.AnnotationRefName]
			if (name != "" && dname == name) || (dname == "" && d.Annotations[AnnotationImageID] == id) {
				replaced = append(replaced, d)
				return true
			}
			return false
		})
		idx.Manifests = append(idx.Manifests, desc)
		added = true
		return true
	})
	return replaced, added, err
}

// restoreIndex undoes addToIndex: it drops desc, and lists again each entry
// it replaced whose name no entry has taken since.
func (s *Store) restoreIndex(ctx context.Context, desc ocispec.Descriptor, replaced []ocispec.Descriptor) error {
	return s.rewriteIndex(ctx, func(idx *ocispec.Index) bool {
		idx.Manifests = slices.DeleteFunc(idx.Manifests, func(d ocispec.Descriptor) bool {
			return d.Digest == desc.Digest && maps.Equal(d.Annotations, desc.Annotations)
		})
		for _, r := range replaced {
			name := r.Annotations[ocispec.AnnotationRefName]
			if !slices.ContainsFunc(idx.Manifests, func(d ocispec.Descriptor) bool {
				return d.Annotations[ocispec.AnnotationRefName] == name &&
					(name != "" || d.Annotations[AnnotationImageID] == r.Annotations[AnnotationImageID])
			}) {
				idx.Manifests = append(idx.Manifests, r)
			}
		}
		return true
	})
}

// rewriteIndex replaces index.json with what fn makes of it, under the
// index lock; fn returns false to leave it as it is.
func (s *Store) rewriteIndex(ctx context.Context, fn func(*ocispec.Index) bool) error {
	unlock, err := lock(ctx, filepath.Join(s.dir, ".lock"), unix.LOCK_EX)
	if err != nil {
		return fmt.Errorf("locking image store index: %w", err)
	}
	defer unlock()
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	if !fn(&idx) {
		return nil
	}
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(s.indexPath(), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("updating image store index: %w", err)
	}
	return nil
}

func newIndex() ocispec.Index {
	return ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{},
	}
}

// readIndex needs no lock: index.json is only ever replaced by rename.
func (s *Store) readIndex() (ocispec.Index, error) {
	b, err := os.ReadFile(s.indexPath())
	if errors.Is(err, fs.ErrNotExist) {
		return newIndex(), nil
	}
	if err != nil {
		return ocispec.Index{}, fmt.Errorf("reading image store index: %w", err)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return ocispec.Index{}, fmt.Errorf("reading image store index %q: %w", s.indexPath(), err)
	}
	if idx.Manifests == nil {
		idx.Manifests = []ocispec.Descriptor{}
	}
	return idx, nil
}

// List returns the images in the store, oldest first. Manifests in
// index.json without a valid airlock image ID are left out.
func (s *Store) List() ([]Entry, error) {
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, d := range idx.Manifests {
		id := digest.Digest(d.Annotations[AnnotationImageID])
		if checkID(id) != nil || d.Digest.Validate() != nil {
			continue
		}
		out = append(out, Entry{Name: d.Annotations[ocispec.AnnotationRefName], ID: id, Manifest: d.Digest})
	}
	return out, nil
}

// Has reports whether the image id is listed in the store.
func (s *Store) Has(id digest.Digest) bool {
	_, err := s.entry(id)
	return err == nil
}

func (s *Store) entry(id digest.Digest) (Entry, error) {
	if err := checkID(id); err != nil {
		return Entry{}, err
	}
	entries, err := s.List()
	if err != nil {
		return Entry{}, err
	}
	for _, e := range entries {
		if e.ID == id {
			return e, nil
		}
	}
	return Entry{}, fmt.Errorf("%w: image %q is not in the store", errdefs.ErrNotFound, id)
}

// Image reads the image id back from the store's OCI layout, checking its
// manifest and config against their digests. Layers are checked as Rootfs
// unpacks them.
func (s *Store) Image(id digest.Digest) (v1.Image, error) {
	e, err := s.entry(id)
	if err != nil {
		return nil, err
	}
	p, err := layout.FromPath(s.ociDir())
	if err != nil {
		return nil, fmt.Errorf("reading image store: %w", err)
	}
	img, err := p.Image(v1.Hash{Algorithm: string(e.Manifest.Algorithm()), Hex: e.Manifest.Encoded()})
	if err != nil {
		return nil, fmt.Errorf("reading image %q: %w", id, err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return nil, fmt.Errorf("reading image %q: %w", id, err)
	}
	if got := digest.FromBytes(raw); got != e.Manifest {
		return nil, fmt.Errorf("%w: manifest of image %q is %s, the index says %s", ErrDigest, id, got, e.Manifest)
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading image %q: %w", id, err)
	}
	if got := digest.FromBytes(rawCfg); got != id {
		return nil, fmt.Errorf("%w: config of image %q is %s", ErrDigest, id, got)
	}
	return img, nil
}

// MaxConfig caps an image's config blob. Real configs are a few KiB
// (the history of a hundred layers included); images.Verify refuses a
// larger one at import, so every stored image's config fits.
const MaxConfig units.Bytes = 4 << 20

// Config reads image id's config straight from its blob, checking it
// against id, which is its digest. Unlike Image it reads neither the index
// nor the manifest: it is for a caller that has found the image listed.
func (s *Store) Config(id digest.Digest) (ocispec.Image, error) {
	var img ocispec.Image
	if err := checkID(id); err != nil {
		return img, err
	}
	f, err := os.Open(filepath.Join(s.blobDir(), id.Encoded()))
	if err != nil {
		return img, fmt.Errorf("reading the config of image %q: %w", id, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(MaxConfig)+1))
	if err != nil {
		return img, fmt.Errorf("reading the config of image %q: %w", id, err)
	}
	if len(b) > int(MaxConfig) {
		return img, fmt.Errorf("the config of image %q is larger than the %s cap", id, MaxConfig)
	}
	if got := digest.FromBytes(b); got != id {
		return img, fmt.Errorf("%w: config of image %q is %s", ErrDigest, id, got)
	}
	if err := json.Unmarshal(b, &img); err != nil {
		return img, fmt.Errorf("reading the config of image %q: %w", id, err)
	}
	return img, nil
}

// checkID accepts only sha256 digests in canonical form, so an ID is safe
// to use as a file name.
func checkID(id digest.Digest) error {
	if id.Validate() != nil || id.Algorithm() != digest.SHA256 {
		return fmt.Errorf("%w: %q is not a sha256 image ID", errdefs.ErrInvalidArgument, id)
	}
	return nil
}

func toDigest(h v1.Hash) (digest.Digest, error) {
	d := digest.Digest(h.String())
	if d.Validate() != nil || d.Algorithm() != digest.SHA256 {
		return "", fmt.Errorf("%w: digest %q is not sha256", errdefs.ErrInvalidArgument, h)
	}
	return d, nil
}

// createOnce writes data to path unless path already exists. The content
// appears whole or not at all: it is written to a temporary file and linked
// into place, which fails rather than replace a file a concurrent Put wrote.
func createOnce(path string, data []byte) error {
	if _, err := os.Lstat(path); err == nil {
		return nil
	}
	if err := atomicfile.Create(path, data, 0o644); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}
