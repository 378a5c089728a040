package oci

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/forkserver"
)

// staleSocket leaves at path what a killed supervisor leaves: a socket
// file no one listens on.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := net.Dial("unix", path); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dialing the stale socket: %v; want ECONNREFUSED", err)
	}
}

// TestStaleAgentSocketIsNoAgent: the socket a killed supervisor left in
// the bundle counts as no relay at all. A plain exec goes to the control
// socket at once; a run-code exec, which only the agent takes, waits for
// the new supervisor's relay (as after a resume) instead of failing on
// the stale socket.
func TestStaleAgentSocketIsNoAgent(t *testing.T) {
	s := relayWithAgent(t, func(agent.Frame) agent.Frame {
		return agent.Frame{Type: agent.Started, Payload: agent.Uint32(42)}
	})
	sock := filepath.Join(s.bundle, agentSocket)
	live := filepath.Join(s.bundle, "live.sock")
	// The relay, not yet bound where execs look: a socket connects by its
	// inode, so renaming it back is the new supervisor's listen.
	if err := os.Rename(sock, live); err != nil {
		t.Fatal(err)
	}
	staleSocket(t, sock)

	begin := time.Now()
	_, _, err := s.startAgent(context.Background(), &specs.Process{Args: []string{"sh", "-c", "true"}, Cwd: "/"}, execStdio(t), false)
	if !errors.Is(err, errNoAgent) || time.Since(begin) > time.Second {
		t.Errorf("a plain exec on a stale socket: %v after %v; want errNoAgent at once (the control socket takes it)", err, time.Since(begin))
	}

	relisten := time.AfterFunc(100*time.Millisecond, func() { os.Rename(live, sock) })
	defer relisten.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pid, x, err := s.startAgent(ctx, &specs.Process{Args: forkserver.ClientArgv("/w/job.py"), Cwd: "/"}, execStdio(t), false)
	if err != nil || pid != 42 {
		t.Fatalf("a run-code exec on a stale socket, a relay listening 100ms later: pid %d, %v; want the relay's pid", pid, err)
	}
	x.release()
}
