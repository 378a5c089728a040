package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"
)

func (s *Store) rootfsDir() string { return filepath.Join(s.dir, "unpacked") }

// Rootfs returns the directory holding the root filesystem of the image id,
// unpacking it first if it is not there yet. The tree is shared by every run
// and must not be written to.
func (s *Store) Rootfs(ctx context.Context, id digest.Digest) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	dir := s.rootfsDir()
	final := filepath.Join(dir, id.Encoded())
	if done, err := isDir(final); err != nil {
		return "", err
	} else if done {
		return final, nil
	}
	unlock, err := lock(ctx, filepath.Join(dir, ".lock-"+id.Encoded()), unix.LOCK_EX)
	if err != nil {
		return "", fmt.Errorf("locking rootfs of %q: %w", id, err)
	}
	defer unlock()
	if done, err := isDir(final); err != nil {
		return "", err
	} else if done {
		return final, nil // another caller unpacked it while we waited
	}
	// Before a new unpack, not at every use: the directory also holds a
	// lock file per image, and listing it cost a run 0.3 ms here.
	s.Sweep()
	if err := s.unpack(ctx, id, final); err != nil {
		return "", fmt.Errorf("unpacking image %q: %w", id, err)
	}
	return final, nil
}

func isDir(p string) (bool, error) {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("%q is not a directory", p)
	}
	return true, nil
}

// Sweep removes the .tmp-* directories of unpacks that died. Unpacks in
// progress hold rootfs/.lock shared; if any does, the sweep waits for a
// later call. Rootfs sweeps before each unpack, and `airlock reap` too.
func (s *Store) Sweep() {
	dir := s.rootfsDir()
	unlock, ok := tryLock(filepath.Join(dir, ".lock"), unix.LOCK_EX)
	if !ok {
		return
	}
	defer unlock()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// unpack builds the tree in a temporary directory and renames it to final.
// The caller holds the lock on id.
func (s *Store) unpack(ctx context.Context, id digest.Digest, final string) error {
	img, err := s.Image(id)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("reading config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("listing layers: %w", err)
	}
	if len(layers) != len(cfg.RootFS.DiffIDs) {
		return fmt.Errorf("%w: %d layers but %d diff_ids in the config", ErrDigest, len(layers), len(cfg.RootFS.DiffIDs))
	}

	dir := s.rootfsDir()
	unlock, err := lock(ctx, filepath.Join(dir, ".lock"), unix.LOCK_SH)
	if err != nil {
		return err
	}
	defer unlock()
	tmp, err := os.MkdirTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if !renamed {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return err
	}
	defer root.Close()
	for i, l := range layers {
		if err := applyLayer(ctx, root, l, cfg.RootFS.DiffIDs[i]); err != nil {
			return fmt.Errorf("layer %d/%d: %w", i+1, len(layers), err)
		}
	}
	if err := syncFS(tmp); err != nil {
		return fmt.Errorf("syncing rootfs: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	renamed = true
	syncDir(dir)
	return nil
}

// applyLayer unpacks one layer, hashing its uncompressed bytes, trailing
// padding included, against the config's diff_id.
func applyLayer(ctx context.Context, root *os.Root, l v1.Layer, diffID v1.Hash) error {
	if diffID.Algorithm != "sha256" {
		return fmt.Errorf("%w: diff_id %s is not sha256", ErrDigest, diffID)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return fmt.Errorf("reading layer: %w", err)
	}
	defer rc.Close()
	h := sha256.New()
	r := io.TeeReader(ctxReader{ctx, rc}, h)
	if err := UnpackLayer(root, r); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("reading layer: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != diffID.Hex {
		return fmt.Errorf("%w: layer content is sha256:%s, the config says %s", ErrDigest, got, diffID)
	}
	return nil
}
