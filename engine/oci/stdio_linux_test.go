package oci

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/engine"
)

// What was written before drain's grace ran out reaches the writer even
// when a process still holds the pipe and the copy is slow to run, and
// drain returns: past the grace, once the relay ended the pipe (more),
// or, with no relay, once what the pipe holds is read.
func TestStdioDrainKeepsWritten(t *testing.T) {
	for _, relay := range []bool{false, true} {
		// The first write takes longer than the grace: the rest is still
		// in the pipe when the grace runs out.
		out := &slowWriter{delay: 200 * time.Millisecond}
		s, err := newStdio(&engine.Process{Stdout: out})
		if err != nil {
			t.Fatal(err)
		}
		held := s.child[1]                 // a process left running holds it
		want := strings.Repeat("x", 60000) // over one read of the copy
		if _, err := held.WriteString(want); err != nil {
			t.Fatal(err)
		}
		var more func()
		asked := 0
		if relay {
			more = func() {
				asked++
				held.Close()
			}
		}
		s.drain(10*time.Millisecond, more)
		if got := out.b.String(); got != want || relay && asked != 1 {
			t.Errorf("relay %v: drain passed on %d of %d bytes, asked the relay %d times; want all, once", relay, len(got), len(want), asked)
		}
		held.Close()
		s.close()
	}
}

type slowWriter struct {
	delay time.Duration
	b     strings.Builder
}

func (w *slowWriter) Write(p []byte) (int, error) {
	if w.b.Len() == 0 {
		time.Sleep(w.delay)
	}
	return w.b.Write(p)
}
