package server

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/runner"
)

// An exec's output is kept server-side as it arrives (the runner passes
// at most the output limit of each stream live), so that streams can send
// it at their own pace and a WebSocket client can resume from any offset.

const (
	streamStdout = 0
	streamStderr = 1
)

var streamNames = [2]string{"stdout", "stderr"}

// execSession is one exec in progress or recently ended.
type execSession struct {
	id, sandboxID string

	mu     sync.Mutex
	out    [2][]byte
	wake   chan struct{} // closed and replaced at each change
	done   bool
	result runner.Result
	err    error

	kill  context.CancelFunc
	stdin *stdinFeed
	// reg, for an exec kept for reconnects, counts its output against
	// the registry's buffer.
	reg *execRegistry
}

func newExecID() string {
	b := make([]byte, 10)
	rand.Read(b)
	return "ex-" + hex.EncodeToString(b)
}

type streamWriter struct {
	e *execSession
	i int
}

func (w streamWriter) Write(p []byte) (int, error) {
	e := w.e
	e.mu.Lock()
	e.out[w.i] = append(e.out[w.i], p...)
	close(e.wake)
	e.wake = make(chan struct{})
	e.mu.Unlock()
	if e.reg != nil {
		e.reg.grow(e, int64(len(p)))
	}
	return len(p), nil
}

func (e *execSession) finish(res runner.Result, err error) {
	e.mu.Lock()
	e.done, e.result, e.err = true, res, err
	close(e.wake)
	e.wake = make(chan struct{})
	e.mu.Unlock()
}

// outcome is the exec's Result, or why it could not run.
func (e *execSession) outcome() (runner.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.result, e.err
}

// snapshot returns what lies past off in each stream, whether the exec
// has ended (then the chunks are the last), and a channel closed at the
// next change.
func (e *execSession) snapshot(off [2]int64) (chunks [2][]byte, done bool, wake chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range chunks {
		if off[i] < int64(len(e.out[i])) {
			chunks[i] = e.out[i][off[i]:len(e.out[i]):len(e.out[i])]
		}
	}
	return chunks, e.done, e.wake
}

// stdinFeed passes input messages to the program's stdin, in order,
// without making the message reader wait for each one to be read. At most
// stdinQueue bytes wait for the program: past that, send blocks, and so
// the WebSocket reader stops reading, and TCP pushes back on the client.
type stdinFeed struct {
	mu      sync.Mutex
	buf     []byte        // received, not yet handed to the pipe
	pending int           // bytes of buf plus those in the pipe's write
	closed  bool          // close_stdin, or the exec ended
	wake    chan struct{} // closed and replaced at each change
	pr      *io.PipeReader
}

// stdinQueue caps the input bytes one exec holds for its program.
const stdinQueue = 1 << 20

func newStdinFeed() *stdinFeed {
	pr, pw := io.Pipe()
	f := &stdinFeed{wake: make(chan struct{}), pr: pr}
	go func() {
		for {
			f.mu.Lock()
			b, closed, wake := f.buf, f.closed, f.wake
			f.buf = nil
			f.mu.Unlock()
			if len(b) > 0 {
				pw.Write(b) // after the exec, the reader is closed: writes fail and are dropped
				f.mu.Lock()
				f.pending -= len(b)
				f.changed()
				f.mu.Unlock()
				continue
			}
			if closed {
				pw.Close()
				return
			}
			<-wake
		}
	}()
	return f
}

// changed wakes whoever waits on f; f.mu is held.
func (f *stdinFeed) changed() {
	close(f.wake)
	f.wake = make(chan struct{})
}

// send queues b for the program, waiting for room while the queue is
// full; after close_stdin, b is dropped.
func (f *stdinFeed) send(ctx context.Context, b []byte) error {
	for {
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			return nil
		}
		// A message bigger than the queue goes in alone.
		if f.pending == 0 || f.pending+len(b) <= stdinQueue {
			f.buf = append(f.buf, b...)
			f.pending += len(b)
			f.changed()
			f.mu.Unlock()
			return nil
		}
		wake := f.wake
		f.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// close ends stdin once what is queued has been passed on.
func (f *stdinFeed) close() {
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		f.changed()
	}
	f.mu.Unlock()
}

// execRegistry holds the execs a WebSocket client may reconnect to, and
// counts the output they keep against max: past it, the output of ended
// execs goes, oldest first, and while that is not enough new ones are
// refused (room).
type execRegistry struct {
	mu    sync.Mutex
	m     map[string]*execSession
	kept  map[*execSession]int64 // output bytes of each exec in m
	ended []*execSession         // those of m that have ended, oldest first
	total int64                  // the sum of kept
	max   int64
}

func newExecRegistry(max int64) *execRegistry {
	return &execRegistry{m: map[string]*execSession{}, kept: map[*execSession]int64{}, max: max}
}

func (r *execRegistry) get(id string) *execSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}

// add registers e, unless the output kept is at max even after dropping
// that of every ended exec.
func (r *execRegistry) add(e *execSession) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trim()
	if r.total >= r.max {
		return newError(KindOverLimit, fmt.Sprintf("WebSocket execs in progress keep %d bytes of output for reconnects, the most this server allows (--max-exec-buffer %d); wait for one to end, then retry", r.total, r.max))
	}
	r.m[e.id] = e
	r.kept[e] = 0
	e.reg = r
	return nil
}

// grow counts n more bytes of e's output.
func (r *execRegistry) grow(e *execSession, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.kept[e]; !ok {
		return // dropped already
	}
	r.kept[e] += n
	r.total += n
	r.trim()
}

// ended marks e as ended: its output may be dropped for room.
func (r *execRegistry) end(e *execSession) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.kept[e]; ok {
		r.ended = append(r.ended, e)
	}
	r.trim()
}

// trim drops ended execs, oldest first, while the output kept passes
// max; r.mu is held.
func (r *execRegistry) trim() {
	for r.total > r.max && len(r.ended) > 0 {
		e := r.ended[0]
		r.ended = r.ended[1:]
		r.drop(e)
	}
}

// drop forgets e; r.mu is held. A client still attached to e reads on
// from its own reference.
func (r *execRegistry) drop(e *execSession) {
	n, ok := r.kept[e]
	if !ok {
		return
	}
	r.total -= n
	delete(r.kept, e)
	delete(r.m, e.id)
	for i, x := range r.ended {
		if x == e {
			r.ended = append(r.ended[:i:i], r.ended[i+1:]...)
			break
		}
	}
}

func (r *execRegistry) forget(e *execSession) {
	r.mu.Lock()
	r.drop(e)
	r.mu.Unlock()
}

// startExec runs spec in sb on ctx, in the background, its output kept
// in the returned session. keep registers it for reconnects until
// execKeep after it ends, refused as over_limit while the output kept
// is at Options.MaxExecBuffer.
// done releases the sandbox's runner once the exec has ended, or at once
// if it is refused.
func (s *Server) startExec(ctx context.Context, sb *runner.Sandbox, done func(), spec runner.ExecSpec, withStdin, keep bool) (*execSession, error) {
	ctx, kill := context.WithCancel(ctx)
	e := &execSession{id: newExecID(), sandboxID: sb.ID(), wake: make(chan struct{}), kill: kill}
	if keep {
		if err := s.execs.add(e); err != nil {
			kill()
			done()
			return nil, err
		}
	}
	if withStdin {
		e.stdin = newStdinFeed()
		spec.Stdin = e.stdin.pr
	}
	spec.Stdout, spec.Stderr = streamWriter{e, streamStdout}, streamWriter{e, streamStderr}
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		defer kill()
		defer done()
		begin := time.Now()
		res, err := sb.Exec(ctx, spec)
		s.metrics.execDur.Observe(time.Since(begin).Seconds())
		if e.stdin != nil {
			e.stdin.pr.CloseWithError(errors.New("the exec has ended"))
			e.stdin.close()
		}
		if err != nil && res.ID != "" {
			res.Reason, res.Error, res.ErrorKind = runner.ReasonError, err.Error(), runner.ErrorKind(err)
			err = nil
		}
		s.metrics.result(res)
		e.finish(res, err)
		if keep {
			s.execs.end(e)
			time.AfterFunc(execKeep, func() { s.execs.forget(e) })
		}
	}()
	return e, nil
}

// outEvent is one chunk of output, in NDJSON and on the WebSocket.
type outEvent struct {
	Type    string `json:"type"`
	Data    string `json:"data,omitempty"`
	DataB64 string `json:"data_b64"`
	Offset  int64  `json:"offset"`
}

type exitEvent struct {
	Type   string        `json:"type"`
	Result runner.Result `json:"result"`
}

type errorEvent struct {
	Type  string      `json:"type"`
	Error ErrorDetail `json:"error"`
}

// maxPiece caps the output one event carries.
const maxPiece = 64 << 10

// pieceLen is how much of c the next event carries: at most maxPiece,
// cut before a UTF-8 sequence that maxPiece would split.
func pieceLen(c []byte) int {
	if len(c) <= maxPiece {
		return len(c)
	}
	for n := maxPiece; n > maxPiece-utf8.UTFMax; n-- {
		if utf8.RuneStart(c[n]) {
			return n
		}
	}
	return maxPiece
}

// pump sends e's output from off on, then its end, through send.
func pump(ctx context.Context, e *execSession, off [2]int64, text bool, send func(v any) error) error {
	for {
		chunks, done, wake := e.snapshot(off)
		for i, c := range chunks {
			for len(c) > 0 {
				n := pieceLen(c)
				ev := outEvent{Type: streamNames[i], DataB64: base64.StdEncoding.EncodeToString(c[:n]), Offset: off[i]}
				if text && utf8.Valid(c[:n]) {
					ev.Data = string(c[:n])
				}
				if err := send(ev); err != nil {
					return err
				}
				off[i] += int64(n)
				c = c[n:]
			}
		}
		if done {
			res, err := e.outcome()
			if err != nil {
				return send(errorEvent{Type: "error", Error: errorDetail(err)})
			}
			return send(exitEvent{Type: "exit", Result: res})
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Server) postExec(w http.ResponseWriter, r *http.Request) {
	var q ExecRequest
	if err := s.body(w, r, &q); err != nil {
		writeError(w, err)
		return
	}
	if q.Type != "" || q.Stdin {
		writeError(w, invalid("type and stdin belong to the WebSocket's execute message; here give the whole stdin as stdin_b64"))
		return
	}
	spec, err := q.spec()
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if _, kube, _ := s.svc.KubeSandbox(id); kube {
		s.execKube(w, r, id, spec)
		return
	}
	sb, done, err := s.svc.Open(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	// Refused before the stream's 200, as an error response.
	if _, err := sb.CheckExec(spec); err != nil {
		done()
		writeError(w, err)
		return
	}
	// A client that hangs up kills the exec, as ^C does to airlock exec.
	e, _ := s.startExec(r.Context(), sb, done, spec, false, false) // only a kept exec is refused
	if !acceptsNDJSON(r) {
		<-e.wait()
		res, err := e.outcome()
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
		return
	}
	// The exec may run as long as its timeout; each line, not the whole,
	// must reach a client that reads within lineTimeout. One that stops
	// reading ends the handler, and with it the exec and its output held.
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Now().Add(lineTimeout))
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc.Flush()
	enc := json.NewEncoder(w)
	pump(r.Context(), e, [2]int64{}, false, func(v any) error {
		rc.SetWriteDeadline(time.Now().Add(lineTimeout))
		if err := enc.Encode(v); err != nil {
			return err
		}
		return rc.Flush()
	})
}

// lineTimeout bounds the sending of one NDJSON line, as a WebSocket
// message's is bounded.
var lineTimeout = time.Minute

// wait returns a channel closed once the exec has ended.
func (e *execSession) wait() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for {
			_, done, wake := e.snapshot([2]int64{1 << 62, 1 << 62})
			if done {
				close(ch)
				return
			}
			<-wake
		}
	}()
	return ch
}

func acceptsNDJSON(r *http.Request) bool {
	for _, a := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, _ := strings.Cut(strings.TrimSpace(a), ";"); strings.EqualFold(mt, "application/x-ndjson") {
			return true
		}
	}
	return false
}
