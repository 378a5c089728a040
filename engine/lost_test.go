package engine

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
)

func TestGVisorLogs(t *testing.T) {
	const (
		fallback = `W1202 sandbox.go:1500] Wait RPC to container "x" failed: EOF. Will try waiting on the sandbox process instead.` + "\n"
		signaled = "I1202 cli.go:317] Exiting with status: 9\n"     // killed by SIGKILL
		exited   = "I1202 cli.go:317] Exiting with status: 35072\n" // exit code 137
	)
	for _, tc := range []struct {
		name, file, text string
		exited, killed   bool
		logged           bool
	}{
		{"no log", "", "", false, false, false},
		{"clean end", "runsc.log.1.boot.txt", "I1202 boot.go:779] application exiting with killed by signal 9\n", true, false, true},
		{"sandbox killed under the shim", "runsc.log.1.boot.txt", "I1202 calibrated_clock.go:74] CalibratedClock(Realtime): ready\n", false, false, true},
		{"sandbox killed under runsc run", "runsc.log.1.run.txt", fallback + signaled, false, true, false},
		{"fast program, sandbox gone first", "runsc.log.1.run.txt", fallback + exited, false, false, false},
		{"program killed, wait answered", "runsc.log.1.run.txt", signaled, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.file != "" {
				os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.text), 0o600)
			}
			exited, logged := GVisorExited(dir)
			killed := GVisorSandboxKilled(dir)
			if exited != tc.exited || killed != tc.killed || logged != tc.logged {
				t.Errorf("exited %v killed %v logged %v; want %v %v %v", exited, killed, logged, tc.exited, tc.killed, tc.logged)
			}
		})
	}
}

func TestLostIsClassified(t *testing.T) {
	err := Lost("runsc (pid %d) was killed by %s from outside airlock", 7, "SIGKILL")
	if !errors.Is(err, ErrSandboxLost) || !errdefs.IsUnavailable(err) {
		t.Errorf("%v: not ErrSandboxLost and unavailable", err)
	}
}

func TestGVisorLogFlags(t *testing.T) {
	got := GVisorLogFlags("/r/sandbox-logs/%ID%/", "boot")
	want := []string{"--debug-log=/r/sandbox-logs/%ID%/", "--debug-command=boot"}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %q, want %q", got, want)
	}
}
