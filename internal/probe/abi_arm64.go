//go:build linux

package main

import "golang.org/x/sys/unix"

// archCalls lists no attempts: an arm64 process has only the native entry
// point.
func archCalls([]call) []call { return nil }

// trap makes c's call in the child; see forkAndTrap.
//
//go:nosplit
//go:norace
func trap(c *call) unix.Errno {
	_, _, e := unix.RawSyscall6(c.nr, c.args[0], c.args[1], c.args[2], c.args[3], c.args[4], c.args[5])
	return e
}
