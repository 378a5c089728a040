// Command peakrss runs a command and writes the command's own peak
// resident set size, in bytes, to a file:
//
//	peakrss FILE -- ARGV...
//
// A process's ru_maxrss counts the memory of the process it was forked
// from: at exec the kernel folds the old address space's high-water mark
// into it, and a child of a Go program shares its parent's until exec. So
// a command started by a large test binary reports at least that binary's
// size. Started by this small process instead, it reports its own (with
// this one's few MiB as a floor). Stdio and the environment pass through,
// and peakrss ends as the command did: with its code, or its signal.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 4 || os.Args[2] != "--" {
		fmt.Fprintln(os.Stderr, "usage: peakrss FILE -- ARGV...")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[3], os.Args[4:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		fmt.Fprintf(os.Stderr, "peakrss: %v\n", err)
		os.Exit(127)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if err := os.WriteFile(os.Args[1], []byte(strconv.FormatInt(ru.Maxrss*1024, 10)), 0o600); err != nil {
		fmt.Fprintf(os.Stderr, "peakrss: %v\n", err)
		os.Exit(127)
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		// Go's runtime leaves a signal it was not asked to catch to its
		// default action, so this ends the process as the command ended.
		syscall.Kill(os.Getpid(), ws.Signal())
		time.Sleep(time.Second)
		os.Exit(128 + int(ws.Signal()))
	}
	os.Exit(ws.ExitStatus())
}
