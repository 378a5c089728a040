package oci

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/engine"
)

// stdio is an exec's descriptors 0-2 as handed to the sandbox, and the
// copies between airlock's ends of them and the Process's reader and
// writers, as os/exec would make them.
type stdio struct {
	child  [3]*os.File
	owned  [3]bool    // child files this opened, to close once sent
	ends   []*os.File // airlock's ends
	copies sync.WaitGroup
	stderr io.Writer
}

func newStdio(p *engine.Process) (_ *stdio, err error) {
	s := &stdio{stderr: p.Stderr}
	defer func() {
		if err != nil {
			s.closeChild()
			s.close()
		}
	}()
	switch in := p.Stdin.(type) {
	case nil:
		s.child[0], err = os.Open(os.DevNull)
		s.owned[0] = true
	case *os.File:
		s.child[0] = in
	default:
		var r, w *os.File
		if r, w, err = os.Pipe(); err == nil {
			s.child[0], s.owned[0] = r, true
			s.ends = append(s.ends, w)
			// A program that never reads its stdin ends this copy when
			// close closes w.
			go func() {
				io.Copy(w, in)
				w.Close()
			}()
		}
	}
	if err != nil {
		return s, err
	}
	if s.child[1], s.owned[1], err = s.out(p.Stdout); err != nil {
		return s, err
	}
	if sameWriter(p.Stdout, p.Stderr) {
		s.child[2] = s.child[1]
		return s, nil
	}
	s.child[2], s.owned[2], err = s.out(p.Stderr)
	return s, err
}

// out returns the program's end for w.
func (s *stdio) out(w io.Writer) (*os.File, bool, error) {
	switch w := w.(type) {
	case nil:
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		return f, true, err
	case *os.File:
		return w, false, nil
	default:
		r, pw, err := os.Pipe()
		if err != nil {
			return nil, false, err
		}
		s.ends = append(s.ends, r)
		s.copies.Add(1)
		go func() {
			defer s.copies.Done()
			io.Copy(w, r)
		}()
		return pw, true, nil
	}
}

// sameWriter reports whether stdout and stderr are one writer, which then
// gets one descriptor for both, so that their order is kept. Writers of
// an incomparable type are never the same.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() { recover() }()
	return a != nil && a == b
}

// closeChild closes the program's ends this opened, once the sandbox has
// its own copies.
func (s *stdio) closeChild() {
	for i, f := range s.child {
		if f != nil && s.owned[i] {
			f.Close()
		}
	}
}

// drain waits for the output copies to reach the end of the output, for
// up to grace: a process the program left running may keep its stdout
// open. Nothing is written to the Process's writers after drain.
func (s *stdio) drain(grace time.Duration) {
	done := make(chan struct{})
	go func() {
		s.copies.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
		s.close()
		<-done
	}
}

// failed drains, then writes why the program did not start to its stderr.
func (s *stdio) failed(why string) {
	s.drain(outputGrace)
	if s.stderr != nil {
		io.WriteString(s.stderr, why)
	}
}

func (s *stdio) close() {
	for _, f := range s.ends {
		f.Close()
	}
}
