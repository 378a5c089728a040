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
	"github.com/airlock-sandbox/airlock/units"
)

// An exec's output passes through its session on its way to the
// clients that stream it, in a window per stream (outBuf): the bytes every
// attached reader has been sent are dropped, but for the last execRetain
// of an exec kept for reconnects (WebSocket). While a stream holds its
// cap, its writer waits for a reader to take some, and so the program
// waits on its write (a WebSocket exec with no client, for execUnread at
// most): memory stays bounded by constants whatever the output limit.
// Writers stop waiting once the exec is being ended (killed, its client
// gone, its timeout or output limit passed, the server stopping), so that
// the engine can drain and reap it; what then does not fit is dropped,
// and the stream ends there.

const (
	streamStdout = 0
	streamStderr = 1
)

var streamNames = [2]string{"stdout", "stderr"}

const (
	// execWindow is how many bytes of one stream may wait to be sent:
	// 16 events of maxPiece, enough to keep a reader busy, while the 256
	// execs --max-execs allows hold 512MiB at most.
	execWindow = 1 << 20
	// execRetain is how many bytes already sent a WebSocket exec keeps
	// per stream for a reconnect. What a dropped connection loses is what
	// was in flight: the two ends' socket buffers, well under 2MiB but on
	// long fast links (Linux grows a send buffer to 4MiB at most), and
	// what the client had not yet handled. More would cost every WebSocket
	// exec, whose most is then 2*(execRetain+execWindow), 6MiB
	// (execReserve).
	execRetain = 2 << 20
	// execResultBytes is the most of each stream's head a streamed exec's
	// Result keeps (with its last 64KiB, total and sha256): its client had
	// the whole as it came, so the output limit does not set what the
	// server holds until the exec ends.
	execResultBytes = 1 << 20
)

// execUnread is how long a WebSocket exec's writers wait while no client
// is attached: a reconnect after a dropped connection comes well within
// it, and loses nothing. Past it the stream keeps its newest bytes and
// drops the oldest, so that a program whose client is gone is not held
// (nor an engine draining its output after it exited: the docker engine
// gives up on a drain after 10s).
var execUnread = 3 * time.Second

// execGrace is how long past the exec's timeout its writers still wait:
// the engine counts the timeout from the program's start, after the
// exec's setup, then kills it and drains its output (the docker engine
// gives up on a drain after 10s).
var execGrace = 5 * time.Second

// execFace says how an exec's output is taken.
type execFace int

const (
	// faceResult: POST exec as JSON. The Result carries the output (its
	// head and tail), so the session keeps none.
	faceResult execFace = iota
	// faceStream: POST exec as NDJSON, one reader from offset 0.
	faceStream
	// faceKept: the WebSocket, whose clients may reconnect from an
	// offset within execRetain of what was sent.
	faceKept
)

// execSession is one exec in progress or recently ended.
type execSession struct {
	id, sandboxID string

	mu      sync.Mutex
	out     [2]outBuf
	cap     int64 // the most one stream holds: its retention and window
	retain  int64
	readers map[*execReader]struct{}
	wake    chan struct{} // closed and replaced at each change
	// ending, once set, lets the writers go on without waiting.
	ending bool
	// unread is when the last reader of a kept exec left (or the exec
	// began): see execUnread.
	unread time.Time
	done   bool
	ended  chan struct{} // closed once done
	result runner.Result
	err    error

	kill  context.CancelFunc
	stdin *stdinFeed
	// reg, for an exec kept for reconnects, counts the output it holds
	// against the registry's buffer (a running exec's most, reserved).
	reg *execRegistry
}

// outBuf is one stream's output from offset base on.
type outBuf struct {
	base int64
	buf  []byte
	// sent is the furthest offset a reader has been sent.
	sent int64
	// cut is set once the writer dropped bytes: the stream ends at
	// base+len(buf).
	cut bool
	// limit is the exec's output limit: the runner passes a stream live
	// up to it, and a stream that reaches it is being ended.
	limit int64
}

func (b *outBuf) end() int64 { return b.base + int64(len(b.buf)) }

// execReader is a client's place in each stream.
type execReader struct {
	e   *execSession
	off [2]int64
}

func newExecSession(id, sandboxID string, face execFace) *execSession {
	e := &execSession{id: id, sandboxID: sandboxID, cap: execWindow, readers: map[*execReader]struct{}{}, wake: make(chan struct{}), ended: make(chan struct{}), unread: time.Now()}
	if face == faceKept {
		e.retain = execRetain
		e.cap += execRetain
	}
	return e
}

func newExecID() string {
	b := make([]byte, 10)
	rand.Read(b)
	return "ex-" + hex.EncodeToString(b)
}

// changed wakes whoever waits on e; e.mu is held.
func (e *execSession) changed() {
	close(e.wake)
	e.wake = make(chan struct{})
}

// held is the output e holds, for the registry.
func (e *execSession) held() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return int64(len(e.out[0].buf) + len(e.out[1].buf))
}

// count passes a change of n bytes held to the registry.
func (e *execSession) count(n int64) {
	if e.reg != nil && n != 0 {
		e.reg.grow(e, n)
	}
}

type streamWriter struct {
	e *execSession
	i int
}

// Write keeps p, waiting while the stream holds its cap, until a reader
// takes some or the exec is being ended; then what does not fit is
// dropped. It never fails, as the runner's capture never does.
func (w streamWriter) Write(p []byte) (int, error) {
	e, n := w.e, len(p)
	e.mu.Lock()
	b := &e.out[w.i]
	var added int64
	for len(p) > 0 && !b.cut {
		room := e.cap - int64(len(b.buf))
		if room <= 0 {
			if e.ending {
				b.cut = true
				e.changed()
				break
			}
			unread := e.retain > 0 && len(e.readers) == 0
			wait := execUnread - time.Since(e.unread)
			if unread && wait <= 0 {
				// No client for execUnread: the oldest bytes go.
				d := min(int64(len(p)), e.cap) - room
				b.buf = b.buf[d:]
				b.base += d
				added -= d
				continue
			}
			wake := e.wake
			e.mu.Unlock()
			e.count(added)
			added = 0
			if unread {
				t := time.NewTimer(wait)
				select {
				case <-wake:
				case <-t.C:
				}
				t.Stop()
			} else {
				<-wake
			}
			e.mu.Lock()
			continue
		}
		k := min(room, int64(len(p)))
		b.buf = append(b.buf, p[:k]...)
		p = p[k:]
		added += k
		if b.limit > 0 && b.end() >= b.limit {
			// The runner kills the exec at its output limit.
			e.ending = true
		}
		e.changed()
	}
	e.mu.Unlock()
	e.count(added)
	return n, nil
}

// end lets the writers go on without waiting: the exec is being ended.
func (e *execSession) end() {
	e.mu.Lock()
	if !e.ending {
		e.ending = true
		e.changed()
	}
	e.mu.Unlock()
}

func (e *execSession) finish(res runner.Result, err error) {
	e.mu.Lock()
	e.done, e.ending, e.result, e.err = true, true, res, err
	close(e.ended)
	e.changed()
	e.mu.Unlock()
}

// outcome is the exec's Result, or why it could not run.
func (e *execSession) outcome() (runner.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.result, e.err
}

// wait returns a channel closed once the exec has ended.
func (e *execSession) wait() <-chan struct{} { return e.ended }

// attach adds a reader from off, which must lie within what e holds.
func (e *execSession) attach(off [2]int64) (*execReader, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, o := range off {
		b := &e.out[i]
		switch {
		case o < 0 || o > b.end():
			return nil, invalid("%s_offset %d: the exec has written %d bytes of %s so far; give an offset from 0 to that", streamNames[i], o, b.end(), streamNames[i])
		case o < b.base:
			return nil, newError(KindNotFound, fmt.Sprintf("%s_offset %d: the output before offset %d of %s is no longer kept (the server keeps the last %s of each stream already sent); reconnect from %d or later, and find the rest in the exit event's Result (its head and tail)", streamNames[i], o, b.base, streamNames[i], units.Bytes(e.retain), b.base))
		}
	}
	r := &execReader{e: e, off: off}
	e.readers[r] = struct{}{}
	return r, nil
}

// detach removes r: the output only it had left to take may go, and the
// writers, which may wait for r, look again (with no reader left, they
// wait execUnread at most).
func (r *execReader) detach() {
	e := r.e
	e.mu.Lock()
	delete(e.readers, r)
	if len(e.readers) == 0 {
		e.unread = time.Now()
	}
	freed := e.trim(0) + e.trim(1)
	e.changed()
	e.mu.Unlock()
	e.count(-freed)
}

// advance records that r was sent n more bytes of stream i.
func (r *execReader) advance(i int, n int64) {
	e := r.e
	e.mu.Lock()
	r.off[i] += n
	b := &e.out[i]
	b.sent = max(b.sent, r.off[i])
	freed := e.trim(i)
	e.mu.Unlock()
	e.count(-freed)
}

// trim drops what stream i no longer needs: the bytes every reader has
// been sent, but for the retention behind the furthest one; e.mu is held.
// It returns how many went.
func (e *execSession) trim(i int) int64 {
	b := &e.out[i]
	keep := b.sent - e.retain
	for r := range e.readers {
		keep = min(keep, r.off[i])
	}
	if k := keep - b.base; k > 0 {
		b.buf = b.buf[k:]
		b.base = keep
		e.changed()
		return k
	}
	return 0
}

// snapshot returns what lies past r's offsets in each stream, whether
// the exec has ended (then the chunks are the last), and a channel closed
// at the next change.
func (r *execReader) snapshot() (chunks [2][]byte, done bool, wake chan struct{}) {
	e := r.e
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range chunks {
		b := &e.out[i]
		if from := r.off[i] - b.base; from < int64(len(b.buf)) {
			chunks[i] = b.buf[from:len(b.buf):len(b.buf)]
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
// counts the output they may hold against max: a running exec its most,
// execReserve, reserved when it is admitted (add), so that what is
// admitted never grows past max; an ended one what it holds. Past max the
// output of ended execs goes, oldest first, and while that is not enough
// new execs are refused.
type execRegistry struct {
	mu    sync.Mutex
	m     map[string]*execSession
	kept  map[*execSession]*keptExec
	ended []*execSession // those of m that have ended, oldest first
	total int64          // the sum of kept's charges
	max   int64
}

// keptExec is what an exec of the registry holds, and whether it runs.
type keptExec struct {
	held    int64
	running bool
}

// execReserve is the most a WebSocket exec holds: its retention and
// window of each stream.
const execReserve = 2 * (execRetain + execWindow)

// charge is what k counts against the registry's max.
func (k *keptExec) charge() int64 {
	if k.running {
		return execReserve
	}
	return k.held
}

func newExecRegistry(max int64) *execRegistry {
	return &execRegistry{m: map[string]*execSession{}, kept: map[*execSession]*keptExec{}, max: max}
}

func (r *execRegistry) get(id string) *execSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}

// add registers e, reserving execReserve for it, unless that does not fit
// under max even after dropping the output of every ended exec.
func (r *execRegistry) add(e *execSession) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var droppable int64
	for _, x := range r.ended {
		droppable += r.kept[x].held
	}
	if r.total-droppable+execReserve > r.max {
		return newError(KindOverLimit, fmt.Sprintf("the WebSocket execs in progress hold or may hold %s of output for their clients and reconnects, and a new one may hold %s: past the %s this server allows (--max-exec-buffer), room for %d WebSocket execs at once; wait for one to end, then retry", units.Bytes(r.total), units.Bytes(execReserve), units.Bytes(r.max), r.max/execReserve))
	}
	r.trim(execReserve)
	r.m[e.id] = e
	// e may hold output already (a test's session).
	r.kept[e] = &keptExec{held: e.held(), running: true}
	r.total += execReserve
	e.reg = r
	return nil
}

// grow counts n more bytes (fewer, when negative) held by e.
func (r *execRegistry) grow(e *execSession, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.kept[e]
	if !ok {
		return // dropped already
	}
	r.total -= k.charge()
	k.held += n
	r.total += k.charge()
	r.trim(0)
}

// ended marks e as ended: it counts what it holds, which may be dropped
// for room.
func (r *execRegistry) end(e *execSession) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k, ok := r.kept[e]; ok && k.running {
		r.total -= k.charge()
		k.running = false
		r.total += k.charge()
		r.ended = append(r.ended, e)
	}
	r.trim(0)
}

// trim drops ended execs, oldest first, while the output held and room
// more pass max; r.mu is held.
func (r *execRegistry) trim(room int64) {
	for r.total+room > r.max && len(r.ended) > 0 {
		r.drop(r.ended[0])
	}
}

// drop forgets e; r.mu is held. A client still attached to e reads on
// from its own reference.
func (r *execRegistry) drop(e *execSession) {
	k, ok := r.kept[e]
	if !ok {
		return
	}
	r.total -= k.charge()
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

// startExec runs spec in sb on ctx, in the background, its output passed
// through the returned session as face asks. A kept exec is registered
// for reconnects until execKeep after it ends, refused as over_limit
// while its most (execReserve) does not fit under Options.MaxExecBuffer.
// done releases the sandbox's runner once the exec has ended, or at once
// if it is refused.
func (s *Server) startExec(ctx context.Context, sb *runner.Sandbox, done func(), spec runner.ExecSpec, withStdin bool, face execFace) (*execSession, error) {
	ctx, kill := context.WithCancel(ctx)
	e := newExecSession(newExecID(), sb.ID(), face)
	e.kill = kill
	if face == faceKept {
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
	// Writers wait no longer once the exec is killed, its client gone,
	// or its timeout passed: the engine then kills it and drains its
	// output, which must not wait on a reader that may never come. An
	// exec that CheckExec refuses fails in Exec before it writes.
	wctx := ctx
	stopTimer := func() {}
	if face != faceResult {
		limits, _ := sb.CheckExec(spec)
		for i := range e.out {
			e.out[i].limit = limits.OutputBytes
		}
		if limits.TimeoutMS > 0 {
			wctx, stopTimer = context.WithTimeout(ctx, time.Duration(limits.TimeoutMS)*time.Millisecond+execGrace)
		}
		context.AfterFunc(wctx, e.end)
		spec.Stdout, spec.Stderr = streamWriter{e, streamStdout}, streamWriter{e, streamStderr}
		spec.ResultBytes = execResultBytes
	}
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		defer kill()
		defer stopTimer()
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
		if face == faceKept {
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

// pump sends the output past r's offsets, then the exec's end, through
// send.
func pump(ctx context.Context, r *execReader, text bool, send func(v any) error) error {
	for {
		chunks, done, wake := r.snapshot()
		for i, c := range chunks {
			for len(c) > 0 {
				n := pieceLen(c)
				ev := outEvent{Type: streamNames[i], DataB64: base64.StdEncoding.EncodeToString(c[:n]), Offset: r.off[i]}
				if text && utf8.Valid(c[:n]) {
					ev.Data = string(c[:n])
				}
				if err := send(ev); err != nil {
					return err
				}
				r.advance(i, int64(n))
				c = c[n:]
			}
		}
		if done {
			res, err := r.e.outcome()
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
	if !acceptsNDJSON(r) {
		e, _ := s.startExec(r.Context(), sb, done, spec, false, faceResult) // only a kept exec is refused
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
	// reading ends the handler, and with it the exec and its output held
	// (a window: the program waits on its writes meanwhile).
	e, _ := s.startExec(r.Context(), sb, done, spec, false, faceStream)
	rd, err := e.attach([2]int64{})
	if err != nil {
		e.kill()
		<-e.wait()
		writeError(w, err)
		return
	}
	defer rd.detach()
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Now().Add(lineTimeout))
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc.Flush()
	enc := json.NewEncoder(w)
	pump(r.Context(), rd, false, func(v any) error {
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

func acceptsNDJSON(r *http.Request) bool {
	for _, a := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, _ := strings.Cut(strings.TrimSpace(a), ";"); strings.EqualFold(mt, "application/x-ndjson") {
			return true
		}
	}
	return false
}
