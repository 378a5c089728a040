package oci

import (
	"io"
	"log/slog"
	"os"
	"strings"
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
			a, x, client := relayFixture(t)
			fromAgent, agentOut, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			go a.read(agent.NewReader(fromAgent, agent.MaxPayload), fromAgent)
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
			if c.want != "" && x.out[0] != nil {
				t.Error("a failed agent left an exec's pipe open")
			}
			agentOut.Close()
		})
	}
}

// relayFixture is an agent with exec 1 in flight, whose stdout the
// returned file reads. The sandbox's control socket does not exist:
// killing the agent is a no-op.
func relayFixture(t *testing.T) (*agentProc, *relayed, *os.File) {
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
	x := &relayed{started: make(chan agent.Frame, 1), acks: make(chan struct{}, 1), out: [2]*os.File{out, nil}}
	a := &agentProc{s: s, pid: 1, w: w, execs: map[uint32]*relayed{1: x}, dead: make(chan struct{})}
	return a, x, client
}
