package server

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/units"
)

// A download is scanned into a spool file under <root>/server/spool
// before its first byte is sent, so that a refusal can still be an error
// response. A client that stops reading holds its spool until the
// transfer's deadline; the spool budget bounds what all of them hold
// together, so that stalled clients cannot fill airlock's root.

// spoolBudget counts the bytes held by every open spool file.
type spoolBudget struct {
	max  int64
	held atomic.Int64
}

func (b *spoolBudget) take(n int64) bool {
	for {
		h := b.held.Load()
		if h+n > b.max {
			return false
		}
		if b.held.CompareAndSwap(h, h+n) {
			return true
		}
	}
}

func (b *spoolBudget) give(n int64) { b.held.Add(-n) }

// spoolFile is an unlinked file whose size is charged to the budget as it
// grows, and given back as it shrinks or closes. It is not an *os.File,
// whose WriteString, WriteAt and ReadFrom would write past the count.
type spoolFile struct {
	f    *os.File
	b    *spoolBudget
	pos  int64
	size int64 // the bytes charged: the file's end
}

// spool returns a new unlinked file under <root>/server/spool.
func (s *Server) spool() (*spoolFile, error) {
	dir := filepath.Join(s.svc.Root(), "server", "spool")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, "dl-*")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	return &spoolFile{f: f, b: s.spoolBudget}, nil
}

func (f *spoolFile) Write(p []byte) (int, error) {
	if end := f.pos + int64(len(p)); end > f.size {
		if !f.b.take(end - f.size) {
			return 0, fmt.Errorf("%w: the server holds %s of downloads in progress, its cap (airlock serve --max-spool %s): retry once others end, or raise --max-spool",
				errdefs.ErrUnavailable, units.Bytes(f.b.held.Load()), units.Bytes(f.b.max))
		}
		f.size = end
	}
	n, err := f.f.Write(p)
	f.pos += int64(n)
	return n, err
}

func (f *spoolFile) Read(p []byte) (int, error) {
	n, err := f.f.Read(p)
	f.pos += int64(n)
	return n, err
}

func (f *spoolFile) Seek(off int64, whence int) (int64, error) {
	pos, err := f.f.Seek(off, whence)
	if err == nil {
		f.pos = pos
	}
	return pos, err
}

// Truncate gives back what is cut; a file is never grown by it here.
func (f *spoolFile) Truncate(n int64) error {
	if err := f.f.Truncate(n); err != nil {
		return err
	}
	if n < f.size {
		f.b.give(f.size - n)
		f.size = n
	}
	return nil
}

func (f *spoolFile) Close() error {
	f.b.give(f.size)
	f.size = 0
	return f.f.Close()
}

func (f *spoolFile) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }
