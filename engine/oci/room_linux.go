package oci

// Room for checkpoints. A pause or a snapshot writes the sandbox's memory
// under airlock's root, and is refused unless that file system keeps
// checkpointReserve free beside it. Checkpoints begun at once would each
// see the same free space, so each one promises itself its room in a
// ledger that every airlock process on the root reads: a file per
// checkpoint under <root>/oci/reservations, flocked by its writer (and by
// the runsc it starts) for as long as the checkpoint is written. A file
// nobody holds is a dead writer's, and the next reader removes it.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/flock"
	"github.com/airlock-sandbox/airlock/units"
)

// checkpointReserve is the space a checkpoint (a pause's, a snapshot's)
// leaves free on the file system of airlock's root: records, receipts and
// the audit log are written there, and a full disk fails every run
// (closed).
const checkpointReserve = 512 << 20

func (e *Engine) reservationsDir() string { return filepath.Join(e.root, "oci", "reservations") }

// reservation is room promised to a checkpoint being written.
type reservation struct {
	f    *os.File
	path string
	need int64
}

// reservationEntry is a reservation's file in the ledger.
type reservationEntry struct {
	// Need is the room promised, in bytes.
	Need int64 `json:"need"`
	// Dev is the file system's device, Dir the checkpoint's directory:
	// what is written there already takes its part of Need.
	Dev uint64 `json:"dev"`
	Dir string `json:"dir"`
}

// File is the reservation's locked file, for the runsc that writes the
// checkpoint to hold (exec.Cmd's ExtraFiles), should this process die
// before it ends.
func (r *reservation) File() *os.File { return r.f }

// Release ends the promise: the checkpoint is written, or never will be.
func (r *reservation) Release() {
	if r == nil || r.f == nil {
		return
	}
	os.Remove(r.path)
	r.f.Close()
	r.f = nil
}

// reserveRoom refuses what, a checkpoint of sandbox id into dir, unless
// dir's file system has room for it, counted as the memory the sandbox's
// cgroup holds (an upper bound: its pages, and cache), beside the room
// promised to checkpoints being written and checkpointReserve; else it
// promises that room until the reservation is released. Clients' pauses,
// or templates warmed from a large program, would otherwise fill the disk
// of airlock's root.
func (e *Engine) reserveRoom(id, dir, what string) (*reservation, error) {
	need, err := cgroup.MemoryInUse(id)
	if err != nil {
		return nil, fmt.Errorf("%w: sizing the checkpoint of %q: %v", errdefs.ErrUnavailable, id, err)
	}
	return e.reserve(dir, need, checkpointReserve, what)
}

// reserve is reserveRoom for need bytes, written into dir, which exists.
func (e *Engine) reserve(dir string, need, reserve int64, what string) (*reservation, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil, fmt.Errorf("%w: reading %s: %v", errdefs.ErrUnavailable, dir, err)
	}
	ledger := e.reservationsDir()
	if err := os.MkdirAll(ledger, 0o700); err != nil {
		return nil, fmt.Errorf("%w: creating the reservations directory: %v", errdefs.ErrUnavailable, err)
	}
	var r *reservation
	// The guard makes each check and its promise one step, for every
	// process on the root.
	err := flock.With(ledger+".lock", func() error {
		promised := promisedOn(ledger, st.Dev)
		if err := roomFor(dir, need, reserve, promised, what); err != nil {
			return err
		}
		f, err := os.CreateTemp(ledger, "r-")
		if err != nil {
			return fmt.Errorf("%w: reserving room for %s: %v", errdefs.ErrUnavailable, what, err)
		}
		b, _ := json.Marshal(reservationEntry{Need: need, Dev: st.Dev, Dir: dir})
		if err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			_, err = f.Write(b)
		}
		if err != nil {
			os.Remove(f.Name())
			f.Close()
			return fmt.Errorf("%w: reserving room for %s: %v", errdefs.ErrUnavailable, what, err)
		}
		r = &reservation{f: f, path: f.Name(), need: need}
		return nil
	})
	if err != nil && !errdefs.IsUnavailable(err) {
		err = fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	return r, err
}

// promisedOn is the room still promised, on the file system of device
// dev, to checkpoints being written: each one's need less what it wrote
// already. The caller holds the ledger's guard.
func promisedOn(ledger string, dev uint64) int64 {
	ents, _ := os.ReadDir(ledger)
	var sum int64
	for _, ent := range ents {
		p := filepath.Join(ledger, ent.Name())
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err == nil {
			// Its writer died, and the runsc it started.
			os.Remove(p)
			f.Close()
			continue
		} else if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			continue
		}
		b, err := io.ReadAll(io.LimitReader(f, 64<<10))
		f.Close()
		var r reservationEntry
		if err != nil || json.Unmarshal(b, &r) != nil || r.Dev != dev {
			continue
		}
		sum += max(r.Need-diskUsage(r.Dir), 0)
	}
	return sum
}

// diskUsage is the space the files of dir take (runsc writes a
// checkpoint's files flat), 0 for a dir that is gone.
func diskUsage(dir string) int64 {
	ents, _ := os.ReadDir(dir)
	var n int64
	for _, ent := range ents {
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(dir, ent.Name()), &st) == nil {
			n += st.Blocks * 512
		}
	}
	return n
}

// roomFor refuses what, which writes need bytes under dir, unless dir's
// file system keeps reserve free beside them and beside promised, the
// room promised to checkpoints being written there.
func roomFor(dir string, need, reserve, promised int64, what string) error {
	avail, err := engine.FreeBytes(dir)
	if err != nil {
		return fmt.Errorf("%w: reading the free space under %s: %v", errdefs.ErrUnavailable, dir, err)
	}
	free := int64(min(avail, 1<<62))
	if free-promised-need < reserve {
		held := ""
		if promised > 0 {
			held = fmt.Sprintf(", %s of it promised to checkpoints being written", units.Bytes(promised))
		}
		return fmt.Errorf("%w: %s needs about %s for its checkpoint under %s (the memory it holds) and %s kept free beside it; the file system has %s free%s: free space there, or resume or destroy paused sandboxes, or remove snapshot templates no longer used (`airlock template rm`)",
			errdefs.ErrUnavailable, what, units.Bytes(need), filepath.Dir(dir), units.Bytes(reserve), units.Bytes(max(free, 0)), held)
	}
	return nil
}
