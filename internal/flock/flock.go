// Package flock serialises read-modify-write of files under airlock's root
// across processes.
package flock

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// With runs fn while holding an exclusive flock on the file at path,
// creating the file (0600) if needed. The lock file is never removed, so
// two processes can never lock different files of the same name.
func With(path string, fn func() error) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("locking %s: %w", path, err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", path, err)
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return fn()
}

// Lock is an exclusive flock held on a file that its holder may remove.
type Lock struct {
	f    *os.File
	path string
}

// Acquire waits until it holds an exclusive flock on path, creating the
// file, or until ctx is done. A holder may remove the file before it lets
// go (Release(true)); a waiter that then wins a lock on the unlinked file
// sees that path no longer names it and tries again, so two holders never
// lock different files of the same name.
func Acquire(ctx context.Context, path string) (*Lock, error) {
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		for {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
			if err != unix.EWOULDBLOCK && err != unix.EINTR {
				break
			}
			select {
			case <-ctx.Done():
				f.Close()
				return nil, fmt.Errorf("waiting for the lock on %s: %w", path, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		var held, named unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &named) == nil && held.Ino == named.Ino && held.Dev == named.Dev {
			return &Lock{f: f, path: path}, nil
		}
		f.Close() // the holder before removed it: lock the new file
	}
}

// File is the locked file, to hand to a child process (exec.Cmd's
// ExtraFiles) that must keep the lock held for as long as it lives, should
// its parent die first: the flock goes with the last descriptor.
func (l *Lock) File() *os.File { return l.f }

// Release lets go of the lock, first removing the file when remove is set.
func (l *Lock) Release(remove bool) {
	if remove {
		os.Remove(l.path)
	}
	l.f.Close() // closing the last descriptor drops the flock
}
