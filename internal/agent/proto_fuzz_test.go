package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// FuzzReader reads the bytes as frames, as the host reads the agent's
// stdout, under a bound. The frames read are exactly the input's prefix
// (each writes back to its own bytes), none is over the bound, and the
// reading ends with io.EOF only at a frame's end, with an unexpected EOF
// inside one, and with an error before a payload over the bound is read.
// The small payloads parse as Write's counterparts encode them.
func FuzzReader(f *testing.F) {
	frames := func(fs ...Frame) []byte {
		var b bytes.Buffer
		for _, fr := range fs {
			if err := Write(&b, fr.Type, fr.ID, fr.Payload); err != nil {
				f.Fatal(err)
			}
		}
		return b.Bytes()
	}
	f.Add(frames(Frame{Ready, 0, []byte(Version)}), uint32(MaxPayload))
	f.Add(frames(Frame{Started, 1, Uint32(42)}, Frame{Stdout, 1, []byte("out")}, Frame{Stderr, 1, nil}, Frame{Ack, 1, nil}), uint32(MaxPayload))
	f.Add(frames(Frame{Failed, 2, Uint32(2)}, Frame{Credit, 2, CreditPayload(Stdout, Window)}), uint32(16))
	f.Add(frames(Frame{Started, 1, []byte{1, 2, 3}}, Frame{Credit, 1, []byte{'X', 0, 0, 0, 1}}), uint32(MaxPayload))
	f.Add([]byte{Stdout, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff}, uint32(MaxPayload))
	f.Add([]byte{Stdout, 0, 0, 0, 1, 0, 0, 0, 9, 'a'}, uint32(MaxPayload))
	f.Add([]byte{Stdout, 0, 0}, uint32(MaxPayload))
	f.Add([]byte{}, uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, max uint32) {
		max %= MaxSpawn + 1
		r := NewReader(bytes.NewReader(b), int(max))
		var again bytes.Buffer
		off := 0
		for {
			fr, err := r.Read()
			if err != nil {
				rest := b[off:]
				switch {
				case len(rest) == 0:
					if err != io.EOF {
						t.Fatalf("at the end of the input: %v, want io.EOF", err)
					}
				case len(rest) < headerSize:
					if err != io.ErrUnexpectedEOF {
						t.Fatalf("inside a header: %v, want io.ErrUnexpectedEOF", err)
					}
				case binary.BigEndian.Uint32(rest[5:]) > max:
					if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
						t.Fatalf("a payload over the bound: %v", err)
					}
				default:
					if !errors.Is(err, io.ErrUnexpectedEOF) {
						t.Fatalf("inside a payload: %v, want io.ErrUnexpectedEOF", err)
					}
				}
				break
			}
			if uint32(len(fr.Payload)) > max {
				t.Fatalf("a payload of %d bytes read under a bound of %d", len(fr.Payload), max)
			}
			if err := Write(&again, fr.Type, fr.ID, fr.Payload); err != nil {
				t.Fatal(err)
			}
			off += headerSize + len(fr.Payload)
			checkPayload(t, fr)
		}
		if !bytes.Equal(again.Bytes(), b[:off]) {
			t.Fatalf("frames written back: %x, read from %x", again.Bytes(), b[:off])
		}
	})
}

// checkPayload checks the small payloads' parsers against their encoders.
func checkPayload(t *testing.T, fr Frame) {
	t.Helper()
	if v, err := ParseUint32(fr.Payload); (err == nil) != (len(fr.Payload) == 4) || err == nil && !bytes.Equal(Uint32(v), fr.Payload) {
		t.Fatalf("ParseUint32(%x) = %d, %v", fr.Payload, v, err)
	}
	typ, n, err := ParseCredit(fr.Payload)
	valid := len(fr.Payload) == 5 && (fr.Payload[0] == Stdout || fr.Payload[0] == Stderr)
	if (err == nil) != valid {
		t.Fatalf("ParseCredit(%x): %v", fr.Payload, err)
	}
	if err == nil && (!bytes.Equal(CreditPayload(typ, int(n)), fr.Payload) || Stream(typ) != map[byte]int{Stdout: 0, Stderr: 1}[typ]) {
		t.Fatalf("ParseCredit(%x) = %q, %d", fr.Payload, typ, n)
	}
}
