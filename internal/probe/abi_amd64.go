//go:build linux

package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// via is an attempt through another entry point: the native attempt from,
// made as name with the other ABI's number nr.
type via struct {
	name, from string
	nr         uintptr
}

// archCalls lists the attempts through the 32-bit int $0x80 and x32 entry
// points, with the arguments of the native attempts in base. A kernel
// without that entry point gives ENOSYS (x32) or SIGSEGV (int $0x80).
func archCalls(base []call) []call {
	byName := make(map[string]call, len(base))
	for _, c := range base {
		byName[c.name] = c
	}
	var out []call
	add := func(prefix string, compat bool, nrBit uintptr, vs []via) {
		for _, v := range vs {
			c, ok := byName[v.from]
			if !ok {
				panic(fmt.Sprintf("no native attempt %q", v.from))
			}
			c.name = prefix + v.name
			c.nr = v.nr | nrBit
			c.compat = compat
			out = append(out, c)
		}
	}
	add("int80_", true, 0, int80Calls)
	add("x32_", false, x32Bit, x32Calls)
	return out
}

// trap makes c's call in the child; see forkAndTrap.
//
//go:nosplit
//go:norace
func trap(c *call) unix.Errno {
	if c.compat {
		// int $0x80 returns in EAX; -4095..-1 is an errno.
		r := int32(int80(c.nr, c.args[0], c.args[1], c.args[2], c.args[3], c.args[4]))
		if r < 0 && r > -4096 {
			return unix.Errno(-r)
		}
		return 0
	}
	_, _, e := unix.RawSyscall6(c.nr, c.args[0], c.args[1], c.args[2], c.args[3], c.args[4], c.args[5])
	return e
}
