package agent

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func TestFrames(t *testing.T) {
	var b bytes.Buffer
	for _, f := range []Frame{{Stdout, 7, []byte("out")}, {Ready, 0, []byte(Version)}, {Stdin, 1 << 31, nil}} {
		if err := Write(&b, f.Type, f.ID, f.Payload); err != nil {
			t.Fatal(err)
		}
	}
	r := NewReader(&b, MaxPayload)
	for _, want := range []Frame{{Stdout, 7, []byte("out")}, {Ready, 0, []byte(Version)}, {Stdin, 1 << 31, []byte{}}} {
		got, err := r.Read()
		if err != nil || got.Type != want.Type || got.ID != want.ID || !bytes.Equal(got.Payload, want.Payload) {
			t.Fatalf("Read = %+v, %v; want %+v", got, err, want)
		}
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("at the end: %v; want io.EOF", err)
	}
}

// TestHostileFrames: what a reader refuses, before reading a payload.
func TestHostileFrames(t *testing.T) {
	header := func(typ byte, id, n uint32) []byte {
		return append(append([]byte{typ}, Uint32(id)...), Uint32(n)...)
	}
	for _, c := range []struct {
		name string
		in   []byte
		want string
	}{
		{"over the bound", header(Stdout, 1, MaxPayload+1), "over the"},
		{"4 GiB", header(Stdout, 1, 1<<32-1), "over the"},
		{"cut in the payload", append(header(Stdout, 1, 10), "short"...), "unexpected EOF"},
		{"cut in the header", []byte{Stdout, 0, 0}, "unexpected EOF"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(c.in), MaxPayload).Read()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Read: %v; want %q", err, c.want)
			}
		})
	}
	if err := Write(io.Discard, Spawn, 1, make([]byte, MaxSpawn+1)); err == nil {
		t.Error("Write took a payload over MaxSpawn")
	}
	for _, b := range [][]byte{nil, {1, 2, 3}, {1, 2, 3, 4, 5}} {
		if _, err := ParseUint32(b); err == nil {
			t.Errorf("ParseUint32(%v) took it", b)
		}
	}
	if _, err := NewReader(bytes.NewReader(nil), MaxPayload).Read(); !errors.Is(err, io.EOF) {
		t.Errorf("an empty stream: %v; want io.EOF", err)
	}
}

func TestCredits(t *testing.T) {
	if Stream(Stdout) != 0 || Stream(Stderr) != 1 {
		t.Errorf("Stream: stdout %d, stderr %d", Stream(Stdout), Stream(Stderr))
	}
	for _, typ := range []byte{Stdout, Stderr} {
		got, n, err := ParseCredit(CreditPayload(typ, Window))
		if err != nil || got != typ || n != Window {
			t.Errorf("ParseCredit(CreditPayload(%q, Window)) = %q, %d, %v", typ, got, n, err)
		}
	}
	for _, b := range [][]byte{nil, {Stdout, 0, 0, 1}, append([]byte{Stdin}, Uint32(5)...), append([]byte{Stdout}, Uint32(5)...)[:4], append(CreditPayload(Stderr, 1), 0)} {
		if _, _, err := ParseCredit(b); err == nil {
			t.Errorf("ParseCredit(%q) took it", b)
		}
	}
}

func TestReadNow(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 8)
	if _, err := ReadNow(r, buf); err != ErrEmpty {
		t.Fatalf("an empty pipe: %v; want ErrEmpty", err)
	}
	w.Write([]byte("held"))
	// A passed deadline stops Read, never ReadNow: what the pipe holds
	// is still read.
	r.SetReadDeadline(time.Now())
	if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline: %v", err)
	}
	if n, err := ReadNow(r, buf); err != nil || string(buf[:n]) != "held" {
		t.Fatalf("ReadNow = %q, %v; want \"held\"", buf[:n], err)
	}
	w.Close()
	if _, err := ReadNow(r, buf); err != io.EOF {
		t.Fatalf("a closed pipe: %v; want io.EOF", err)
	}
}

func TestSendHeld(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w.Write([]byte("held"))
	buf := make([]byte, 3)
	var got []byte
	emit := func(b []byte) error { got = append(got, b...); return nil }
	room := func() int { return len(buf) }
	if err := SendHeld(r, buf, room, emit); err != nil || string(got) != "held" {
		t.Fatalf("SendHeld = %v, passed on %q; want nil, \"held\"", err, got)
	}
	w.Write([]byte("more"))
	if err := SendHeld(r, buf, func() int { return 0 }, emit); err != ErrStopped {
		t.Fatalf("with no room: %v; want ErrStopped", err)
	}
	if err := SendHeld(r, buf, room, func([]byte) error { return io.ErrClosedPipe }); err != ErrStopped {
		t.Fatalf("with emit failing: %v; want ErrStopped", err)
	}
	w.Close()
	if err := SendHeld(r, buf, room, emit); err != io.EOF || string(got) != "helde" {
		t.Fatalf("at the end: %v, passed on %q; want io.EOF, \"helde\" (the chunk emit refused is gone)", err, got)
	}
}

// TestRunCode: only forkserver.ClientArgv's shape is a run-code client's
// exec, the one the agent answers with Started or HandOverFailed.
func TestRunCode(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want bool
	}{
		{[]string{Path, "run-code", "--", "/w/job.py"}, true},
		{[]string{Path, "run-code", "--", "/w/job.py", "a", "b"}, true},
		{[]string{Path, "run-code", "--"}, false},
		{[]string{Path, "run-code", "/w/job.py"}, false},
		{[]string{Path, "run-code-prime"}, false},
		{[]string{"airlock-agent", "run-code", "--", "/w/job.py"}, false},
		{[]string{"python3", "/w/job.py"}, false},
		{nil, false},
	} {
		if got := RunCode(c.argv); got != c.want {
			t.Errorf("RunCode(%q) = %v; want %v", c.argv, got, c.want)
		}
	}
}
