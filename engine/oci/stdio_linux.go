package oci

import (
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/agent"
)

// stdio is an exec's descriptors 0-2 as handed to the sandbox, and the
// copies between airlock's ends of them and the Process's reader and
// writers. The sandbox only ever gets pipes airlock made (or /dev/null):
// never a caller's file, directory or terminal, even when the Process
// holds an *os.File.
type stdio struct {
	child  [3]*os.File // the sandbox's ends, closed here once sent
	ends   []*os.File  // airlock's ends
	outs   []*os.File  // airlock's ends of the output pipes
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
	if p.Stdin == nil {
		s.child[0], err = os.Open(os.DevNull)
	} else {
		var w *os.File
		if s.child[0], w, err = os.Pipe(); err == nil {
			s.ends = append(s.ends, w)
			// A program that never reads its stdin ends this copy when
			// close closes w.
			go func() {
				io.Copy(w, p.Stdin)
				w.Close()
			}()
		}
	}
	if err != nil {
		return s, err
	}
	if s.child[1], err = s.out(p.Stdout); err != nil {
		return s, err
	}
	if sameWriter(p.Stdout, p.Stderr) {
		s.child[2] = s.child[1]
		return s, nil
	}
	s.child[2], err = s.out(p.Stderr)
	return s, err
}

// out returns the program's end for w.
func (s *stdio) out(w io.Writer) (*os.File, error) {
	if w == nil {
		return os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.ends = append(s.ends, r)
	s.outs = append(s.outs, r)
	s.copies.Add(1)
	go func() {
		defer s.copies.Done()
		copyOut(w, r)
	}()
	return pw, nil
}

// copyOut copies r to w until r's end or, once r's read deadline has
// passed, until r holds nothing more: what was written to r before the
// deadline is never lost to it.
func copyOut(w io.Writer, r *os.File) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			agent.SendHeld(r, buf, func() int { return len(buf) }, func(b []byte) error {
				_, err := w.Write(b)
				return err
			})
			return
		}
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pipedStdio is a Process's stdio for os/exec, with every *os.File
// hidden so that os/exec makes pipes: what reaches the runtime, and
// through it the sandbox, is a pipe airlock made. One writer for both
// streams stays one, so that their order is kept.
func pipedStdio(in io.Reader, out, errw io.Writer) (io.Reader, io.Writer, io.Writer) {
	hide := func(w io.Writer) io.Writer {
		if w == nil {
			return nil
		}
		return struct{ io.Writer }{w}
	}
	var r io.Reader
	if in != nil {
		r = struct{ io.Reader }{in}
	}
	o, e := hide(out), hide(errw)
	if sameWriter(out, errw) {
		e = o
	}
	return r, o, e
}

// sameWriter reports whether stdout and stderr are one writer, which then
// gets one descriptor for both, so that their order is kept. Writers of
// an incomparable type are never the same.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() { recover() }()
	return a != nil && a == b
}

// closeChild closes the program's ends once the sandbox has its own
// copies.
func (s *stdio) closeChild() {
	for _, f := range s.child {
		if f != nil {
			f.Close()
		}
	}
}

// drain waits for the output copies to reach the end of the output, for
// up to grace: a process the program left running may keep its stdout
// open. Past grace, more (when not nil) asks whoever writes airlock's
// pipes on the program's behalf (the exec agent's relay) to pass on what
// it holds and end them; then what the pipes hold is read, and no more.
// Nothing is written to the Process's writers after drain.
func (s *stdio) drain(grace time.Duration, more func()) {
	done := make(chan struct{})
	go func() {
		s.copies.Wait()
		close(done)
	}()
	within := func(d time.Duration) bool {
		select {
		case <-done:
			return true
		case <-time.After(d):
			return false
		}
	}
	if within(grace) {
		return
	}
	if more != nil {
		more()
		if within(relayDrainWait) {
			return
		}
	}
	for _, r := range s.outs {
		r.SetReadDeadline(time.Now())
	}
	<-done
}

// failed drains, then writes why the program did not start to its stderr.
func (s *stdio) failed(why string) {
	s.drain(outputGrace, nil)
	if s.stderr != nil {
		io.WriteString(s.stderr, why)
	}
}

func (s *stdio) close() {
	for _, f := range s.ends {
		f.Close()
	}
}

// tail keeps the last bytes written through its tee, to read a runtime's
// refusal that went to the program's stderr.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 512

// tee returns a writer that writes to w (nil: nowhere) and keeps the
// last bytes here.
func (t *tail) tee(w io.Writer) io.Writer { return &teeTail{t: t, w: w} }

type teeTail struct {
	t *tail
	w io.Writer
}

func (w *teeTail) Write(p []byte) (int, error) {
	w.t.mu.Lock()
	w.t.buf = append(w.t.buf, p[max(0, len(p)-tailBytes):]...)
	if len(w.t.buf) > tailBytes {
		w.t.buf = w.t.buf[len(w.t.buf)-tailBytes:]
	}
	w.t.mu.Unlock()
	if w.w == nil {
		return len(p), nil
	}
	return w.w.Write(p)
}

// notFound reports whether the runtime said the program does not exist.
func (t *tail) notFound() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := string(t.buf)
	return strings.Contains(s, "no such file or directory") || strings.Contains(s, "executable file not found")
}
