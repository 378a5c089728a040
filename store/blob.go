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
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"
)

// ErrDigest is wrapped when content does not match its digest or size.
var ErrDigest = errors.New("content does not match its digest")

func (s *Store) blobDir() string { return filepath.Join(s.dir, "oci", "blobs", "sha256") }

// writeBlob copies r into the layout as the blob d of size bytes. It reads
// at most size+1 bytes, and renames the file into place only if both the
// count and the sha256 match. A blob already present is left alone.
func (s *Store) writeBlob(ctx context.Context, r io.Reader, d digest.Digest, size int64) error {
	dir := s.blobDir()
	final := filepath.Join(dir, d.Encoded())
	if fi, err := os.Lstat(final); err == nil && fi.Mode().IsRegular() && fi.Size() == size {
		return nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("writing blob %s: %w", d, err)
	}
	f, err := os.CreateTemp(dir, ".tmp-"+d.Encoded()[:12]+"-*")
	if err != nil {
		return fmt.Errorf("writing blob %s: %w", d, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	// Held until the file is closed: sweepBlobs leaves a locked file alone.
	unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(ctxReader{ctx, r}, size+1))
	if err == nil && n != size {
		err = fmt.Errorf("%w: %s has %d bytes or more, expected %d", ErrDigest, d, n, size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); err == nil && got != d.Encoded() {
		err = fmt.Errorf("%w: got sha256:%s, expected %s", ErrDigest, got, d)
	}
	if err == nil {
		err = f.Chmod(0o444)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		return fmt.Errorf("writing blob %s: %w", d, err)
	}
	return nil
}

// ctxReader fails reads once ctx is done, so a long copy can be cancelled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := context.Cause(c.ctx); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// blobTmpGrace spares a temporary blob file created this instant, before
// its writer has locked it.
const blobTmpGrace = 10 * time.Second

// sweepBlobs removes the temporary files of blob writes that died (an
// import killed midway). A live writer holds an flock on its file.
func (s *Store) sweepBlobs() {
	dir := s.blobDir()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".tmp-") {
			continue
		}
		fi, err := e.Info()
		if err != nil || time.Since(fi.ModTime()) < blobTmpGrace {
			continue
		}
		p := filepath.Join(dir, e.Name())
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			os.Remove(p)
		}
		f.Close()
	}
}
