package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"time"

	"golang.org/x/sys/unix"
)

// lock takes an flock (unix.LOCK_SH or unix.LOCK_EX) on the file at p,
// creating it if missing, and polls until it is granted or ctx is done. The
// returned func releases it.
func lock(ctx context.Context, p string, how int) (func(), error) {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	wait := 5 * time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing the last fd releases the lock
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %q: %w", p, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for %q: %w", p, context.Cause(ctx))
		case <-time.After(wait):
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// tryLock is lock without waiting; ok is false if someone else holds it.
func tryLock(p string, how int) (unlock func(), ok bool) {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false
	}
	if unix.Flock(int(f.Fd()), how|unix.LOCK_NB) != nil {
		f.Close()
		return nil, false
	}
	return func() { f.Close() }, true
}

// lutimes sets the times of name itself, not of what it points to. os.Root
// has no such call, so this goes through the parent directory's fd.
func lutimes(root *os.Root, name string, mtime time.Time) error {
	ts, err := unix.TimeToTimespec(mtime)
	if err != nil {
		return err
	}
	d, err := root.Open(path.Dir(name))
	if err != nil {
		return err
	}
	defer d.Close()
	rc, err := d.SyscallConn()
	if err != nil {
		return err
	}
	if cerr := rc.Control(func(fd uintptr) {
		err = unix.UtimesNanoAt(int(fd), path.Base(name), []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	}); cerr != nil {
		return cerr
	}
	return err
}

// syncFS flushes the filesystem holding dir, so that a tree is on disk
// before the rename that publishes it.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// syncDir makes renames in dir durable. Failure is not fatal: the data
// itself was synced.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
