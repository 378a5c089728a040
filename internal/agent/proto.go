// Package agent is the wire format between airlock and its exec agent.
//
// The agent is a small static program that a gVisor sandbox runs once,
// started the way any exec is (the sandbox's user, no capabilities,
// no-new-privileges, the container's seccomp filter). Execs are then
// forked from it, already under the filter, instead of being started by
// the sentry, which builds the container's seccomp program anew for every
// exec (about 20 ms for airlock's profile).
//
// The host writes frames to the agent's stdin and reads frames from its
// stdout; both are pipes the host made. A frame is a type byte, an exec
// id and a payload length (both big-endian uint32), then the payload.
// Everything the agent writes is hostile: a reader bounds every frame
// (MaxPayload) and the host takes only a pid, an errno, a failed
// hand-over's reason, output bytes and acknowledgements from it. Exit
// statuses are read from the sentry, never from the agent.
package agent

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Frame types. Host to agent:
const (
	// Spawn starts an exec: the payload is a JSON SpawnArgs. The agent
	// answers Started or Failed, or, for a run-code client's exec,
	// HandOverFailed.
	Spawn byte = 'S'
	// Stdin is input for the exec's stdin; an empty one closes it. The
	// agent answers each non-empty one with Ack once it is written.
	Stdin byte = 'I'
	// Reap says the host has waited for the exec: the agent may reap it.
	Reap byte = 'R'
	// Credit gives one of the exec's output streams back bytes of its
	// Window once the host has passed them on: the payload is the
	// stream's frame type (Stdout or Stderr), then the count (4 bytes).
	Credit byte = 'C'
	// Drain asks for the output the exec's pipes hold now, sent without
	// waiting for more: the host sends it once the exec has exited and its
	// output has not ended in time (a process it left running holds its
	// pipes, or the agent was slow). The agent answers Drained.
	Drain byte = 'D'
)

// Agent to host:
const (
	// Ready is the agent's first frame, once it runs: id 0, Version as
	// its payload.
	Ready byte = 'r'
	// Started carries the exec's pid (4 bytes).
	Started byte = 'P'
	// Failed carries the errno (4 bytes) that kept the exec from starting.
	Failed byte = 'F'
	// HandOverFailed answers the Spawn of a run-code client's exec
	// (`/.airlock-agent run-code -- FILE ARGS...`), in place of Started,
	// when the agent could not hand its job to the sandbox's fork server
	// or the job's pid did not come back: nothing of the exec runs (a job
	// that may have started ended with its connection). The payload is
	// why, as text. It is the one way the host learns that the fork
	// server did not run a job: it comes before the job could run, as the
	// answer to the exec, never from the job's output or exit status.
	HandOverFailed byte = 'H'
	// Stdout and Stderr carry output; an empty one is the stream's end.
	Stdout byte = 'O'
	Stderr byte = 'E'
	// Ack says one Stdin frame was written to the exec's stdin.
	Ack byte = 'A'
	// Drained answers a Drain: every byte the exec's pipes held when the
	// Drain came was sent before it.
	Drained byte = 'd'
)

// Version names this wire format; a host takes no agent of another.
const Version = "airlock-agent/4"

// Window is how many bytes of one output stream the agent sends ahead of
// the host's credit. The host writes each exec's output to its client on
// its own, so a client that stops reading stalls its own exec (whose
// program then blocks on a full pipe) and no other; an agent that sends
// past the window breaks the protocol.
const Window = 256 << 10

const (
	headerSize = 9
	// MaxPayload bounds a frame's payload in either direction.
	MaxPayload = 64 << 10
	// MaxSpawn bounds a Spawn's payload (its argv and environment).
	MaxSpawn = 1 << 20
)

// SpawnArgs is a Spawn's payload.
type SpawnArgs struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	// Stdin makes the exec's stdin a pipe fed by Stdin frames; without
	// it, stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// Merged gives stdout and stderr one pipe, so that their order is
	// kept; its output comes as Stdout frames.
	Merged bool `json:"merged,omitempty"`
}

// RunCode reports whether argv is a run-code client's exec,
// `/.airlock-agent run-code -- FILE ARGS...` (forkserver.ClientArgv): the
// agent hands its job to the fork server itself, and answers its Spawn
// with Started or HandOverFailed.
func RunCode(argv []string) bool {
	return len(argv) >= 4 && argv[0] == Path && argv[1] == "run-code" && argv[2] == "--"
}

// Frame is one frame.
type Frame struct {
	Type    byte
	ID      uint32
	Payload []byte
}

// FrameSize is how many bytes a frame with payload takes on the wire.
func FrameSize(payload []byte) int { return headerSize + len(payload) }

// Write writes one frame in a single write, so that writers sharing w
// under a lock never interleave.
func Write(w io.Writer, typ byte, id uint32, payload []byte) error {
	if len(payload) > MaxSpawn {
		return fmt.Errorf("frame payload of %d bytes is over %d", len(payload), MaxSpawn)
	}
	b := make([]byte, headerSize+len(payload))
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:], id)
	binary.BigEndian.PutUint32(b[5:], uint32(len(payload)))
	copy(b[headerSize:], payload)
	_, err := w.Write(b)
	return err
}

// Reader reads frames, refusing any payload over its bound.
type Reader struct {
	r   io.Reader
	max int
	hdr [headerSize]byte
}

// NewReader reads frames from r whose payloads are at most max bytes.
func NewReader(r io.Reader, max int) *Reader { return &Reader{r: r, max: max} }

// Read reads the next frame. Its payload is a new slice.
func (r *Reader) Read() (Frame, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		return Frame{}, err
	}
	f := Frame{Type: r.hdr[0], ID: binary.BigEndian.Uint32(r.hdr[1:])}
	n := binary.BigEndian.Uint32(r.hdr[5:])
	if uint64(n) > uint64(r.max) {
		return Frame{}, fmt.Errorf("a %q frame of %d bytes is over the %d-byte bound", f.Type, n, r.max)
	}
	f.Payload = make([]byte, n)
	if _, err := io.ReadFull(r.r, f.Payload); err != nil {
		return Frame{}, fmt.Errorf("reading a %q frame: %w", f.Type, noEOF(err))
	}
	return f, nil
}

// noEOF makes an end inside a frame an unexpected one.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Uint32 encodes a pid or an errno.
func Uint32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// ParseUint32 decodes a pid or an errno: exactly 4 bytes.
func ParseUint32(b []byte) (uint32, error) {
	if len(b) != 4 {
		return 0, fmt.Errorf("a 4-byte value has %d bytes", len(b))
	}
	return binary.BigEndian.Uint32(b), nil
}

// Stream is the index of an output frame type: 0 for Stdout, 1 for
// Stderr.
func Stream(typ byte) int {
	if typ == Stderr {
		return 1
	}
	return 0
}

// CreditPayload encodes a Credit of n bytes for stream typ.
func CreditPayload(typ byte, n int) []byte {
	return binary.BigEndian.AppendUint32([]byte{typ}, uint32(n))
}

// ParseCredit decodes a Credit: a Stdout or Stderr type, then a count.
func ParseCredit(b []byte) (typ byte, n uint32, err error) {
	if len(b) != 5 || b[0] != Stdout && b[0] != Stderr {
		return 0, 0, fmt.Errorf("a credit of %d bytes (%q)", len(b), b)
	}
	return b[0], binary.BigEndian.Uint32(b[1:]), nil
}
