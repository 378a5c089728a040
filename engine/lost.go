package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// ErrSandboxLost is wrapped when the sandbox ended from outside airlock
// while the program ran: its daemon stopped or restarted, or its runtime's
// process was killed. The program's own outcome is unknown, so the run is
// failed rather than reported as the program's exit.
var ErrSandboxLost = errors.New("sandbox lost")

// Lost returns an ErrSandboxLost error (also errdefs unavailable) saying
// what happened; it tells the user the outcome is unknown.
func Lost(format string, args ...any) error {
	return fmt.Errorf("%w: %w: %s; the program's outcome is unknown: run it again, and if this repeats check the host (`airlock doctor`)",
		errdefs.ErrUnavailable, ErrSandboxLost, fmt.Sprintf(format, args...))
}

// GVisorLogFlags make one runsc command ("boot": the sandbox; "run": the
// runsc run process), and nothing else, write its log into dir, for
// GVisorExited and GVisorSandboxKilled. The sandbox logs about 20 KiB per
// run, runsc run about 7 KiB.
func GVisorLogFlags(dir, command string) []string {
	return []string{"--debug-log=" + filepath.Clean(dir) + "/", "--debug-command=" + command}
}

// Lines the pinned runsc logs: the sandbox when the program has ended and
// it shuts down by itself; runsc run when the sandbox was gone before its
// wait on the program returned, and then the wait status it exits with.
var (
	gvisorExitLine   = []byte("application exiting with")
	gvisorWaitFailed = []byte("Will try waiting on the sandbox process instead")
	gvisorStatus     = regexp.MustCompile(`Exiting with status: (\d+)`)
)

// GVisorExited reads the sandbox's log in dir. logged is false when there
// is no log to judge by; exited is whether the sandbox recorded the
// program's end. A sandbox that logged but never recorded the end died
// from outside: a kill, or the host's OOM killer. Use it only where nothing
// kills the sandbox after a clean end (under dockerd's shim, not runsc run).
// A log CutGVisorLog cut judges the same: runsc appends the end after the
// cut's line.
func GVisorExited(dir string) (exited, logged bool) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.boot.txt"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		logged = true
		if bytes.Contains(b, gvisorExitLine) {
			return true, true
		}
	}
	return false, logged
}

// CutGVisorLog empties the gVisor log file at path once it is larger than
// bound, and writes one line saying so. runsc writes its log with O_APPEND,
// so what it logs next, the end GVisorExited looks for included, comes
// after that line. It returns the size cut, 0 for a log within bound. Call it
// only while the sandbox runs: a cut after its end would take the end too.
func CutGVisorLog(path string, bound int64) (int64, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() || fi.Size() <= bound {
		return 0, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%s: %w", path, fs.ErrInvalid)
	}
	if err := f.Truncate(0); err != nil {
		return 0, err
	}
	_, err = fmt.Fprintf(f, "airlock cut this log at %d bytes (bound %d): the argv of execs, which the sandbox logs, grew it\n", fi.Size(), bound)
	return fi.Size(), err
}

// GVisorSandboxKilled reads runsc run's log in dir: whether the sandbox
// process died by a signal under runsc run's wait. A sandbox that ends by
// itself exits with a code (runsc turns the program's signal into 128+N),
// so a wait status that is a signal, taken from the sandbox process once
// the wait on the program failed, is a kill from outside (or the host's
// OOM killer). A fast program whose sandbox is gone before the wait starts
// takes the same fallback, with an exit code.
func GVisorSandboxKilled(dir string) bool {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.run.txt"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil || !bytes.Contains(b, gvisorWaitFailed) {
			continue
		}
		m := gvisorStatus.FindAllSubmatch(b, -1)
		if len(m) == 0 {
			continue
		}
		ws, err := strconv.ParseUint(string(m[len(m)-1][1]), 10, 32)
		if err == nil && unix.WaitStatus(ws).Signaled() {
			return true
		}
	}
	return false
}
