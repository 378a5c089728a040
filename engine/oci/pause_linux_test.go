package oci

import (
	"bytes"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// TestOlderAgent: only an agent's ready frame reads as an agent from
// before the spawner, which started nothing; anything else an exit 0
// comes with may hide a started program.
func TestOlderAgent(t *testing.T) {
	frame := func(typ byte, payload string) []byte {
		var b bytes.Buffer
		agent.Write(&b, typ, 0, []byte(payload))
		return b.Bytes()
	}
	for _, c := range []struct {
		name string
		out  []byte
		want bool
	}{
		{"a ready frame", frame(agent.Ready, agent.Version), true},
		{"nothing", nil, false},
		{"the spawner's word", []byte(agent.Spawned + "42\n"), false},
		{"another frame", frame(agent.Started, "\x00\x00\x00\x2a"), false},
		{"a torn ready frame", frame(agent.Ready, agent.Version)[:5], false},
	} {
		if got := olderAgent(c.out); got != c.want {
			t.Errorf("%s: olderAgent = %v; want %v", c.name, got, c.want)
		}
	}
}
