//go:build linux && (amd64 || arm64)

// Command probe attempts, one at a time, the system calls that airlock's
// seccomp profile denies, and prints how each one ended. It runs inside a
// sandbox as an unprivileged user with no capabilities.
//
// The output is one line each:
//
//	arch <GOARCH>
//	<name> <errno> <errno-name>    one per attempt, sorted by name
//	done
//
// errno is 0 and its name OK when the call succeeded. A negative number is a
// signal that killed the attempt, such as -31 SIGSYS for a seccomp kill or
// -11 SIGSEGV for int $0x80 on a kernel without 32-bit emulation.
//
// Each attempt runs in a throwaway child process. A call that succeeds
// therefore changes nothing in the probe, and a call that kills cannot stop
// the attempts after it. Arguments are chosen so that an unfiltered kernel
// fails with an errno other than EPERM where it can (EFAULT, EINVAL, EBADF),
// and calls.go gives the errno to expect. EPERM then means the filter refused
// the call. Some calls check a capability before anything else, and there an
// unprivileged caller gets EPERM either way; calls.go says which.
//
// If the probe cannot make an attempt, it exits 1 without printing done. It
// builds for linux/amd64 and linux/arm64.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	// A pipe is a file that is not a terminal, for the ioctl attempts.
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("creating a pipe: %w", err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])

	calls := nativeCalls(uintptr(p[0]))
	calls = append(calls, archCalls(calls)...)
	slices.SortFunc(calls, func(a, b call) int { return strings.Compare(a.name, b.name) })

	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "arch %s\n", runtime.GOARCH)
	for i := range calls {
		r, err := attempt(&calls[i])
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "%s %s\n", calls[i].name, r)
	}
	fmt.Fprintln(b, "done")
	return b.Flush()
}

// result is how an attempt ended: with an errno, or killed by a signal.
type result struct {
	errno unix.Errno
	sig   unix.Signal
}

// String gives the number and name fields of an output line.
func (r result) String() string {
	switch {
	case r.sig != 0:
		name := unix.SignalName(r.sig)
		if name == "" {
			name = "SIG" + strconv.Itoa(int(r.sig))
		}
		return fmt.Sprintf("%d %s", -int(r.sig), name)
	case r.errno == 0:
		return "0 OK"
	}
	name := unix.ErrnoName(r.errno)
	if name == "" {
		name = "E" + strconv.Itoa(int(r.errno))
	}
	return fmt.Sprintf("%d %s", int(r.errno), name)
}
