package oci

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/forkserver"
)

// TestAgentFramesAreHostile feeds the relay's reader what a subverted
// agent could write: frames of unknown execs are dropped, output reaches
// only its own exec, and a frame that breaks the protocol ends the agent
// and every exec's output.
func TestAgentFramesAreHostile(t *testing.T) {
	for _, c := range []struct {
		name   string
		frames func(w io.Writer)
		want   string // in the agent's error; "" keeps it alive
	}{
		{"output of an unknown exec", func(w io.Writer) { agent.Write(w, agent.Stdout, 99, []byte("stray")) }, ""},
		{"an unknown exec started", func(w io.Writer) { agent.Write(w, agent.Started, 99, agent.Uint32(5)) }, ""},
		{"a short pid", func(w io.Writer) { agent.Write(w, agent.Started, 1, []byte{1, 2}) }, "4-byte value"},
		{"an unknown frame", func(w io.Writer) { agent.Write(w, 'Z', 1, []byte("forged")) }, "unexpected"},
		{"a frame over the bound", func(w io.Writer) {
			w.Write(append([]byte{agent.Stdout, 0, 0, 0, 1}, agent.Uint32(agent.MaxPayload+1)...))
		}, "over the"},
		{"a torn frame", func(w io.Writer) { w.Write([]byte{agent.Stdout, 0, 0}) }, "EOF"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, x, client, _ := relayFixture(t)
			agentOut := agentStdout(t, a)
			agent.Write(agentOut, agent.Stdout, 1, []byte("mine"))
			c.frames(agentOut)
			if c.want == "" {
				agent.Write(agentOut, agent.Stdout, 1, nil) // the exec's end
			} else {
				agentOut.Close()
			}
			got, _ := io.ReadAll(client) // ends when the relay closes the exec's pipe
			if string(got) != "mine" {
				t.Errorf("the exec's output: %q; want %q", got, "mine")
			}
			select {
			case <-a.dead:
				if c.want == "" || !strings.Contains(a.err.Error(), c.want) {
					t.Errorf("agent failed with %v; want %q", a.err, c.want)
				}
			case <-time.After(100 * time.Millisecond):
				if c.want != "" {
					t.Errorf("agent still live; want it failed with %q", c.want)
				}
			}
			if c.want != "" && !x.out[0].eof {
				t.Error("a failed agent left an exec's output open")
			}
		})
	}
}

// An exec's output reaches its client through a writer of its own, which
// credits the agent with what it passed on; an agent that sends past the
// window breaks the protocol.
func TestAgentOutputCredit(t *testing.T) {
	a, x, client, toAgent := relayFixture(t)
	agentOut := agentStdout(t, a)
	credits := agent.NewReader(toAgent, agent.MaxPayload)
	chunk := make([]byte, agent.MaxPayload)
	for i := 0; i < 2; i++ {
		agent.Write(agentOut, agent.Stdout, 1, chunk)
		if _, err := io.ReadFull(client, chunk); err != nil {
			t.Fatal(err)
		}
		f, err := credits.Read()
		typ, n, perr := agent.ParseCredit(f.Payload)
		if err != nil || f.Type != agent.Credit || f.ID != 1 || perr != nil || typ != agent.Stdout || n != agent.MaxPayload {
			t.Fatalf("after chunk %d the agent got %q %d %v (%v, %v); want a credit of %d stdout bytes for exec 1", i, f.Type, f.ID, f.Payload, err, perr, agent.MaxPayload)
		}
	}
	// The client stops reading: one chunk fills its pipe, one is being
	// written, and the window holds four.
	for i := 0; i < 2+agent.Window/agent.MaxPayload; i++ {
		agent.Write(agentOut, agent.Stdout, 1, chunk)
	}
	select {
	case <-a.dead:
		if !strings.Contains(a.err.Error(), "window") {
			t.Errorf("agent failed with %v; want the window's", a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an agent past the window is still live")
	}
	if !x.out[0].eof {
		t.Error("a failed agent left an exec's output open")
	}
}

// An agent may send its window in frames of any size: one-byte frames
// while the client reads nothing are within it, and the relay holds them
// in a small multiple of the window, not a slice each. Every byte reaches
// the client, in order, once it reads.
func TestAgentOutputSmallFrames(t *testing.T) {
	a, x, client, toAgent := relayFixture(t)
	agentOut := agentStdout(t, a)
	// The relay's credits, counted as the agent would.
	var credited atomic.Int64
	go func() {
		rd := agent.NewReader(toAgent, agent.MaxPayload)
		for {
			f, err := rd.Read()
			if err != nil {
				return
			}
			if _, n, err := agent.ParseCredit(f.Payload); err == nil {
				credited.Add(int64(n))
			}
		}
	}()
	frames := make([]byte, 0, agent.Window*agent.FrameSize([]byte{0}))
	for i := range agent.Window {
		frames = append(frames, agent.Stdout, 0, 0, 0, 1, 0, 0, 0, 1, byte(i%251))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	go agentOut.Write(frames)
	o := x.out[0]
	for deadline := time.Now().Add(30 * time.Second); ; {
		o.mu.Lock()
		held := o.queued
		o.mu.Unlock()
		if int64(held)+credited.Load() == agent.Window {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay took %d bytes of %d", int64(held)+credited.Load(), agent.Window)
		}
		time.Sleep(time.Millisecond)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(frames)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap growth: %d bytes", grew)
	if grew > 2<<20 {
		t.Errorf("the relay's heap grew by %d bytes holding a %d-byte window", grew, agent.Window)
	}
	select {
	case <-a.dead:
		t.Fatalf("an agent within its window was killed: %v", a.err)
	default:
	}
	agent.Write(agentOut, agent.Stdout, 1, nil)
	got, _ := io.ReadAll(client)
	if len(got) != agent.Window {
		t.Fatalf("the client read %d bytes; want %d", len(got), agent.Window)
	}
	for i, b := range got {
		if b != byte(i%251) {
			t.Fatalf("byte %d is %d; want %d", i, b, i%251)
		}
	}
}

// relayFixture is an agent with exec 1 in flight, whose stdout the
// returned client reads; toAgent reads what the relay sends the agent.
// The sandbox's control socket does not exist: killing the agent is a
// no-op.
func relayFixture(t *testing.T) (a *agentProc, x *relayed, client, toAgent *os.File) {
	t.Helper()
	toAgent, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { toAgent.Close() })
	client, out, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	s := &sandbox{e: &Engine{log: slog.New(slog.DiscardHandler)}, st: sandboxState{ID: "t", Control: "/nonexistent/control.sock"}}
	a = &agentProc{s: s, pid: 1, w: w, execs: map[uint32]*relayed{}, dead: make(chan struct{})}
	x = &relayed{agent: a, id: 1, started: make(chan agent.Frame, 1), acks: make(chan struct{}, 1)}
	x.out[0] = newStream(x, agent.Stdout, out)
	a.execs[1] = x
	go x.out[0].run()
	return a, x, client, toAgent
}

// agentStdout starts a's reader on a new pipe and returns the agent's end
// of it, closed at the test's end.
func agentStdout(t *testing.T, a *agentProc) *os.File {
	t.Helper()
	fromAgent, agentOut, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agentOut.Close() })
	go a.read(newAgentReader(fromAgent), fromAgent)
	return agentOut
}

// TestDeadAgentReaderEnds: once the agent is dead, its reader ends even
// while a process of the sandbox holds the agent's stdout open and
// writes frames into it; no goroutine or descriptor is left per dead
// agent.
func TestDeadAgentReaderEnds(t *testing.T) {
	a, _, _, _ := relayFixture(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close() // the sandbox's process, holding it open
	a.r = r
	done := make(chan struct{})
	go func() {
		a.read(newAgentReader(r), r)
		close(done)
	}()
	a.fail(errors.New("the exec agent ended"))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the dead agent's reader still reads")
	}
}

// relayWithAgent serves the relay of a sandbox whose bundle is a new
// directory, with a fake agent that answers every Spawn with answer's
// frame. The control socket does not exist: killing is a no-op.
func relayWithAgent(t *testing.T, answer func(spawn agent.Frame) agent.Frame) *sandbox {
	t.Helper()
	s := &sandbox{e: &Engine{log: slog.New(slog.DiscardHandler)}, bundle: t.TempDir(), st: sandboxState{ID: "t", Agent: true, Control: "/nonexistent/control.sock"}}
	toAgent, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	a := &agentProc{s: s, pid: 1, w: w, execs: map[uint32]*relayed{}, dead: make(chan struct{})}
	agentOut := agentStdout(t, a)
	go func() {
		defer toAgent.Close()
		rd := agent.NewReader(toAgent, agent.MaxSpawn)
		for {
			f, err := rd.Read()
			if err != nil {
				return
			}
			if f.Type == agent.Spawn {
				ans := answer(f)
				agent.Write(agentOut, ans.Type, f.ID, ans.Payload)
			}
		}
	}()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(s.bundle, agentSocket), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{s: s, a: a}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); ln.Close(); r.stop() })
	go func() {
		for {
			conn, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			go r.serve(ctx, conn)
		}
	}()
	return s
}

// execStdio is three pipe ends to pass as an exec's stdio.
func execStdio(t *testing.T) [3]*os.File {
	t.Helper()
	var files [3]*os.File
	for i := range files {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		files[i] = w
	}
	return files
}

// TestAgentHandOverFailed: the agent's HandOverFailed answer to a
// run-code client's exec reaches the exec as an error of kind
// unavailable, the one way the host learns that the fork server did not
// run a job (the job's own exit and output never say it); the same answer
// to any other exec breaks the protocol. An exec the agent started is a
// pid, whatever the job then prints or exits with.
func TestAgentHandOverFailed(t *testing.T) {
	runCode := &specs.Process{Args: forkserver.ClientArgv("/w/job.py"), Cwd: "/"}
	s := relayWithAgent(t, func(spawn agent.Frame) agent.Frame {
		var req agent.SpawnArgs
		json.Unmarshal(spawn.Payload, &req)
		if req.Argv[len(req.Argv)-1] == "/w/ok.py" {
			return agent.Frame{Type: agent.Started, Payload: agent.Uint32(42)}
		}
		return agent.Frame{Type: agent.HandOverFailed, Payload: []byte("connecting to the fork server: refused")}
	})
	_, _, err := s.startAgent(context.Background(), runCode, execStdio(t), false)
	if !errdefs.IsUnavailable(err) || errors.Is(err, errNoAgent) || !strings.Contains(err.Error(), "connecting to the fork server: refused") {
		t.Errorf("a failed hand-over: %v; want an unavailable error saying why, not left to the control socket", err)
	}
	pid, x, err := s.startAgent(context.Background(), &specs.Process{Args: forkserver.ClientArgv("/w/ok.py"), Cwd: "/"}, execStdio(t), false)
	if err != nil || pid != 42 {
		t.Fatalf("a job handed over: pid %d, %v; want the job's pid", pid, err)
	}
	x.release()
	_, _, err = s.startAgent(context.Background(), &specs.Process{Args: []string{"sh", "-c", "exit 125"}, Cwd: "/"}, execStdio(t), false)
	if err == nil || errors.Is(err, errNoAgent) || errdefs.IsUnavailable(err) {
		t.Errorf("a hand-over failure answering a plain exec: %v; want the protocol broken", err)
	}
}

// TestRunCodeNeedsAgent: a run-code client's exec that no agent takes
// fails as unavailable instead of going to the control socket, where the
// client's failure would look like the job's own exit; any other exec
// goes there.
func TestRunCodeNeedsAgent(t *testing.T) {
	s := &sandbox{e: &Engine{log: slog.New(slog.DiscardHandler)}, bundle: t.TempDir(), st: sandboxState{ID: "t"}}
	_, _, err := s.startAgent(context.Background(), &specs.Process{Args: forkserver.ClientArgv("/w/job.py")}, execStdio(t), false)
	if !errdefs.IsUnavailable(err) || errors.Is(err, errNoAgent) {
		t.Errorf("a run-code exec with no agent: %v; want unavailable", err)
	}
	for _, argv := range [][]string{{"python3", "/w/job.py"}, forkserver.PrimeArgv(), {agentPath, "run-code", "/w/job.py"}} {
		if _, _, err := s.startAgent(context.Background(), &specs.Process{Args: argv}, execStdio(t), false); !errors.Is(err, errNoAgent) {
			t.Errorf("%q with no agent: %v; want errNoAgent", argv, err)
		}
	}
}
