// Package proctest makes real processes in the states tests need.
package proctest

import (
	"os/exec"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/proc"
)

// Zombie starts a child that exits at once and does not reap it; it
// returns once the child is a zombie, with the child's stat then. The
// child is reaped by cmd.Wait, or else by the test's cleanup.
func Zombie(t testing.TB) (*exec.Cmd, proc.Stat) {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting a child to leave a zombie: %v", err)
	}
	t.Cleanup(func() { cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := proc.ReadStat(cmd.Process.Pid)
		if err != nil {
			t.Fatalf("reading the unreaped child %d: %v", cmd.Process.Pid, err)
		}
		if st.State == proc.Zombie {
			return cmd, st
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d never became a zombie: state %c", st.Pid, st.State)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
