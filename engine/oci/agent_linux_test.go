package oci

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
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
