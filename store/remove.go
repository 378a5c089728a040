package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// ErrInUse is wrapped when an image cannot be removed because a run holds
// its root filesystem.
var ErrInUse = errors.New("image in use")

func (s *Store) useLock(id digest.Digest) string {
	return filepath.Join(s.rootfsDir(), ".use-"+id.Encoded())
}

// putLock is held shared by every Put while it writes blobs not yet
// listed, so that Remove's collection never takes them.
func (s *Store) putLock() string { return filepath.Join(s.dir, ".put.lock") }

// Use is Rootfs for a run: it also holds the tree against Remove until
// release is called.
func (s *Store) Use(ctx context.Context, id digest.Digest) (path string, release func(), err error) {
	unlock, err := s.Pin(ctx, id)
	if err != nil {
		return "", nil, err
	}
	path, err = s.Rootfs(ctx, id)
	if err != nil {
		unlock()
		return "", nil, err
	}
	return path, unlock, nil
}

// Pin holds image id's tree against Remove until release is called,
// without unpacking it: a live sandbox's supervisor pins the tree its
// sandbox runs on for as long as the sandbox lives.
func (s *Store) Pin(ctx context.Context, id digest.Digest) (release func(), err error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	unlock, err := lock(ctx, s.useLock(id), unix.LOCK_SH)
	if err != nil {
		return nil, fmt.Errorf("holding rootfs of %q: %w", id, err)
	}
	return unlock, nil
}

// InUse reports whether a run holds image id's tree (see Use).
func (s *Store) InUse(id digest.Digest) bool {
	if checkID(id) != nil {
		return false
	}
	unlock, ok := tryLock(s.useLock(id), unix.LOCK_EX)
	if ok {
		unlock()
	}
	return !ok
}

// Removed says what Remove freed.
type Removed struct {
	Blobs int   `json:"blobs"`
	Bytes int64 `json:"bytes"`
	// Rootfs is set when an unpacked tree was removed.
	Rootfs bool `json:"rootfs"`
}

// Remove drops image id from the store: its index entries, its unpacked
// tree, and every blob no remaining image refers to. It fails with
// ErrInUse while a run holds the tree (see Use). Blobs are collected only
// when no Put is writing; otherwise the next Remove takes them.
func (s *Store) Remove(ctx context.Context, id digest.Digest) (Removed, error) {
	var r Removed
	if err := checkID(id); err != nil {
		return r, err
	}
	if _, err := s.entry(id); err != nil {
		return r, err
	}
	unuse, ok := tryLock(s.useLock(id), unix.LOCK_EX)
	if !ok {
		return r, fmt.Errorf("%w: %w: %s is the root filesystem of a running sandbox; remove it once the run ends (`airlock ps` lists runs)", errdefs.ErrConflict, ErrInUse, id)
	}
	defer unuse()
	unlock, err := lock(ctx, filepath.Join(s.dir, ".lock"), unix.LOCK_EX)
	if err != nil {
		return r, fmt.Errorf("locking image store index: %w", err)
	}
	defer unlock()
	idx, err := s.readIndex()
	if err != nil {
		return r, err
	}
	idx.Manifests = slices.DeleteFunc(idx.Manifests, func(d ocispec.Descriptor) bool {
		return d.Annotations[AnnotationImageID] == id.String()
	})
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return r, err
	}
	if err := atomicfile.WriteFile(s.indexPath(), append(b, '\n'), 0o644); err != nil {
		return r, fmt.Errorf("updating image store index: %w", err)
	}
	// The tree is renamed aside first, so a removal cut short never leaves
	// half a tree under the final name; the next sweep takes the rest.
	final := filepath.Join(s.rootfsDir(), id.Encoded())
	if done, _ := isDir(final); done {
		aside := filepath.Join(s.rootfsDir(), ".tmp-rm-"+id.Encoded())
		if err := os.Rename(final, aside); err != nil {
			return r, fmt.Errorf("removing rootfs of %q: %w", id, err)
		}
		os.RemoveAll(aside)
		r.Rootfs = true
	}
	if unput, ok := tryLock(s.putLock(), unix.LOCK_EX); ok {
		defer unput()
		r.Blobs, r.Bytes, err = s.collect(idx)
	}
	return r, err
}

// collect removes every blob that no manifest in idx refers to. The caller
// holds the index lock and the put lock.
func (s *Store) collect(idx ocispec.Index) (int, int64, error) {
	keep := map[string]bool{}
	for _, d := range idx.Manifests {
		keep[d.Digest.Encoded()] = true
		raw, err := os.ReadFile(filepath.Join(s.blobDir(), d.Digest.Encoded()))
		if err != nil {
			return 0, 0, fmt.Errorf("reading manifest %s: %w (nothing collected)", d.Digest, err)
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			return 0, 0, fmt.Errorf("reading manifest %s: %w (nothing collected)", d.Digest, err)
		}
		keep[m.Config.Digest.Encoded()] = true
		for _, l := range m.Layers {
			keep[l.Digest.Encoded()] = true
		}
	}
	ents, err := os.ReadDir(s.blobDir())
	if err != nil {
		return 0, 0, err
	}
	var n int
	var size int64
	for _, e := range ents {
		if keep[e.Name()] || digest.NewDigestFromEncoded(digest.SHA256, e.Name()).Validate() != nil {
			continue // kept, or not a blob (temporary files are swept by Put)
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if err := os.Remove(filepath.Join(s.blobDir(), e.Name())); err == nil {
			n++
			size += fi.Size()
		}
	}
	return n, size, nil
}
