package oci

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/proc"
)

// The idle init runs, sleeps in the kernel rather than spinning, and
// dies by SIGKILL.
func TestInitRuns(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		if _, err := initELF(); err == nil {
			t.Fatal("initELF gave an init for an architecture it has no code for")
		}
		return
	}
	b, err := initELF()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "init")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := proc.ReadStat(cmd.Process.Pid)
		if err != nil {
			t.Fatalf("init died: %v", err)
		}
		// S (sleeping) once it waits for SIGCHLD.
		if st.State == proc.Sleeping {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("init never slept: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("init ended with %v; want killed by SIGKILL", err)
	}
}
