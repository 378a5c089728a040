//go:build linux && (amd64 || arm64)

package main

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// attempt runs c in a throwaway child and reports how it ended. An error
// means the attempt could not be made.
func attempt(c *call) (result, error) {
	// The child inherits this thread's signal mask. With every signal
	// blocked, no Go handler can run in it, and a fault or a seccomp trap
	// kills it instead.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all, old unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &all, &old); err != nil {
		return result{}, fmt.Errorf("blocking signals: %w", err)
	}
	pid, errno := forkAndTrap(c)
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil); err != nil {
		return result{}, fmt.Errorf("unblocking signals: %w", err)
	}
	if errno != 0 {
		if c.forkFlags != 0 {
			return result{errno: errno}, nil
		}
		return result{}, fmt.Errorf("forking for %q: %w", c.name, errno)
	}

	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(int(pid), &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return result{}, fmt.Errorf("waiting for %q: %w", c.name, err)
		}
		if !ws.Stopped() {
			break
		}
		// Only a child that made itself our tracee can stop; end it.
		if err := unix.Kill(int(pid), unix.SIGKILL); err != nil {
			return result{}, fmt.Errorf("killing %q: %w", c.name, err)
		}
	}
	switch {
	case ws.Exited():
		return result{errno: unix.Errno(ws.ExitStatus())}, nil
	case ws.Signaled():
		return result{sig: ws.Signal()}, nil
	}
	return result{}, fmt.Errorf("waiting for %q: status %#x", c.name, uint32(ws))
}

// forkAndTrap forks. The child makes c's call and exits with its errno, or,
// when the fork is the attempt, exits at once. The child is a copy of one
// thread of a running Go program, so on its side this code must not
// allocate, grow the stack or reach the scheduler: it is nosplit, makes raw
// calls only and calls no function values.
//
//go:nosplit
//go:norace
func forkAndTrap(c *call) (pid uintptr, errno unix.Errno) {
	r, _, e := unix.RawSyscall6(unix.SYS_CLONE, c.forkFlags|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 || r != 0 {
		return r, e
	}
	var code unix.Errno
	if c.forkFlags == 0 {
		code = trap(c)
	}
	unix.RawSyscall(unix.SYS_EXIT_GROUP, uintptr(code), 0, 0)
	for {
	}
}
