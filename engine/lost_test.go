package engine

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// A log past the bound is cut to one line while runsc holds it open with
// O_APPEND; what runsc writes next follows that line, and GVisorExited
// judges the cut log as before.
func TestCutGVisorLog(t *testing.T) {
	const bound = 1 << 20
	dir := t.TempDir()
	path := filepath.Join(dir, "runsc.log.1.boot.txt")
	runsc, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer runsc.Close()
	line := []byte("I1202 kernel.go:1000] EXEC: []string{\"/.airlock-helper\", \"x\", \"true\", \"" + strings.Repeat("a", 64<<10) + "\"}\n")
	write := func(b []byte) {
		t.Helper()
		if _, err := runsc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	for range bound / len(line) {
		write(line)
	}
	below, _ := os.ReadFile(path)
	if n, err := CutGVisorLog(path, bound); n != 0 || err != nil {
		t.Fatalf("a log within the bound: cut %d, %v", n, err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, below) {
		t.Fatal("a log within the bound was changed")
	}

	write(line)
	size := int64(len(below) + len(line))
	if n, err := CutGVisorLog(path, bound); n != size || err != nil {
		t.Fatalf("cut %d, %v; want %d", n, err, size)
	}
	b, _ := os.ReadFile(path)
	if !bytes.HasPrefix(b, []byte("airlock cut this log at "+strconv.FormatInt(size, 10)+" bytes")) || bytes.Count(b, []byte("\n")) != 1 {
		t.Fatalf("cut log: %q", b)
	}
	if exited, logged := GVisorExited(dir); exited || !logged {
		t.Errorf("cut log without an end: exited %v logged %v; want false true", exited, logged)
	}
	write([]byte("I1202 boot.go:779] application exiting with exit status 0\n"))
	after, _ := os.ReadFile(path)
	if !bytes.HasPrefix(after, b) || len(after) <= len(b) {
		t.Fatalf("runsc's next line did not follow the cut's: %q", after)
	}
	if exited, logged := GVisorExited(dir); !exited || !logged {
		t.Errorf("cut log with an end after: exited %v logged %v; want true true", exited, logged)
	}
	if _, err := CutGVisorLog(filepath.Join(dir, "gone.boot.txt"), bound); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing log: %v", err)
	}
}
