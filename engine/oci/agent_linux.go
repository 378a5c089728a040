package oci

// The exec agent of a gVisor sandbox (package internal/agent): the
// sandbox's supervisor runs Serve, which starts the agent through the
// control socket and relays execs to it from a socket in the bundle;
// Exec asks that socket first. The relay passes on the client's own
// stdio pipes, takes only a pid, an errno and output from the agent, and
// the exit status is still the sentry's (Control.Wait). Whatever fails
// before the agent reads the exec leaves it to the control socket, which
// isolates it the same way: the agent is a speed-up, never a different
// policy. An exec the agent read but never answered is not started again.
// A run-code client's exec is the exception: only the agent hands its job
// to the fork server and says, in its answer, when it could not
// (agent.HandOverFailed), so it never goes to the control socket, where
// the client's failure and the job's own exit look alike.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

const (
	// agentPath is where the agent is bound, read-only, in a gVisor
	// sandbox's root.
	agentPath = agent.Path
	// agentSocket, in the bundle, is where the relay takes execs.
	agentSocket = "agent.sock"
	// agentTimeout bounds the agent's start, its answer to a spawn, and
	// each write to it; an agent that takes longer is killed.
	agentTimeout = 10 * time.Second
	// relayAnswer bounds the relay's answer to an exec: reading it, the
	// agent's start (the control socket's call and the ready frame), the
	// spawn's write and the agent's answer each take up to agentTimeout.
	// The client waits a little longer, so that it always gets the answer.
	relayAnswer = 5 * agentTimeout
	// maxRelayReply bounds the relay's answer as the client reads it.
	maxRelayReply = 4 << 10
	// maxHandOverWhy bounds the reason of a failed hand-over the relay
	// passes on, well within maxRelayReply once quoted.
	maxHandOverWhy = 512
	// relayDrain is the byte a client writes on its connection to ask for
	// the exec's drain: what the agent holds is passed on, and the
	// exec's output ends.
	relayDrain = 'D'
	// relayDrainWait bounds the client's wait for a drain: the relay's
	// wait for the agent's answer, and a little more.
	relayDrainWait = agentTimeout + 2*time.Second
	// relayWaited is the byte a client writes as it lets go of an exec it
	// waited for. A connection that ends without it is a client that
	// vanished (its process killed): the relay kills the exec's program,
	// as the client would have at a cancel.
	relayWaited = 'W'
)

// AgentPath is where setup installs the exec agent under root.
func AgentPath(root string) string { return filepath.Join(root, "tools", "airlock-agent") }

// agentBind is the bind of the agent into a new gVisor sandbox, or false
// when none is installed (execs then use the control socket alone).
func (e *Engine) agentBind() (src string, ok bool) {
	if e.agent == "" {
		return "", false
	}
	// runsc refuses a mount source that runs through a symlink.
	src, err := filepath.EvalSymlinks(e.agent)
	if err != nil {
		e.log.Debug("no exec agent; execs start through the control socket", "path", e.agent, "err", err)
		return "", false
	}
	if fi, err := os.Stat(src); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		e.log.Debug("exec agent is not an executable file; execs start through the control socket", "path", src)
		return "", false
	}
	return src, true
}

// errNoAgent means the agent started nothing (none serves the sandbox,
// or it could not start the program): the exec goes through the control
// socket instead.
var errNoAgent = errors.New("no exec agent")

// handOverError is the agent's answer that it could not hand a run-code
// job to the fork server: nothing ran, and the sandbox is up (its agent
// answered). It is errdefs.IsUnavailable.
type handOverError struct{ sandbox, why string }

func (e *handOverError) Error() string {
	return fmt.Sprintf("the exec agent of sandbox %q could not hand the job to the fork server: %q", e.sandbox, e.why)
}

func (e *handOverError) Unwrap() error { return errdefs.ErrUnavailable }

// relayReply is the relay's one answer.
type relayReply struct {
	Pid   int32 `json:"pid,omitempty"`
	Errno int   `json:"errno,omitempty"`
	// Unavailable: nothing was started; the client may use the control
	// socket.
	Unavailable string `json:"unavailable,omitempty"`
	// Taken: the agent read the exec but never said whether it started
	// it. It must not be started again, and its status is unknown.
	Taken string `json:"taken,omitempty"`
	// HandOver: the agent could not hand a run-code job to the fork
	// server (agent.HandOverFailed), and says why: nothing runs.
	HandOver string `json:"handOver,omitempty"`
	Err      string `json:"err,omitempty"`
}

// agentExec is an exec the relay started, held by its connection.
type agentExec struct{ conn *net.UnixConn }

// drain asks the relay for what the exec's pipes hold, and to end its
// output then.
func (x *agentExec) drain() {
	x.conn.SetWriteDeadline(time.Now().Add(agentTimeout))
	x.conn.Write([]byte{relayDrain})
}

// release, once the exec was waited for (or killed), lets the agent
// reap it.
func (x *agentExec) release() {
	x.conn.SetWriteDeadline(time.Now().Add(agentTimeout))
	x.conn.Write([]byte{relayWaited})
	x.conn.Close()
}

// startAgent starts pr through the sandbox's agent, with the program's
// ends of its stdio. errNoAgent: nothing was started, and the control
// socket may start it. A run-code client's exec is the agent's alone:
// it waits for the relay, and is never left to the control socket.
func (s *sandbox) startAgent(ctx context.Context, pr *specs.Process, child [3]*os.File, stdin bool) (pid int32, x *agentExec, err error) {
	var wait time.Duration
	if agent.RunCode(pr.Args) {
		defer func() {
			if errors.Is(err, errNoAgent) {
				err = fmt.Errorf("%w: no exec agent took the run-code job (%v): only the agent hands a job to the fork server and says when it could not", errdefs.ErrUnavailable, err)
			}
		}()
		wait = agentTimeout // a sandbox just made: its supervisor serves it within milliseconds
	}
	if !s.st.Agent {
		return 0, nil, errNoAgent
	}
	// The request is the agent's own Spawn, sent with the three stdio
	// descriptors.
	req, _ := json.Marshal(agent.SpawnArgs{Argv: pr.Args, Env: pr.Env, Dir: pr.Cwd, Stdin: stdin, Merged: child[1] == child[2]})
	if len(req) > agent.MaxSpawn-64 {
		return 0, nil, fmt.Errorf("%w: a request of %d bytes", errNoAgent, len(req))
	}
	conn, err := s.dialRelay(ctx, wait)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", errNoAgent, err) // not served (yet, or any more)
	}
	defer func() {
		if err != nil {
			conn.Close()
		}
	}()
	conn.SetDeadline(time.Now().Add(relayAnswer + 5*time.Second))
	// A cancelled exec still takes the relay's answer for a while: a
	// program the agent started is then killed as any cancelled exec's
	// is, not left running unseen.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now().Add(agentTimeout)) })
	defer stop()
	rights := unix.UnixRights(int(child[0].Fd()), int(child[1].Fd()), int(child[2].Fd()))
	msg := append(agent.Uint32(uint32(len(req))), req...)
	for oob := rights; len(msg) > 0; oob = nil {
		n, _, err := conn.WriteMsgUnix(msg, oob, nil)
		if err != nil {
			return 0, nil, fmt.Errorf("sending an exec to the sandbox's agent relay: %w", err)
		}
		msg = msg[n:]
	}
	// The reply is all the relay writes on the connection.
	var rep relayReply
	if err := json.NewDecoder(io.LimitReader(conn, maxRelayReply)).Decode(&rep); err != nil {
		return 0, nil, fmt.Errorf("reading the agent relay's answer: %w", err)
	}
	switch {
	case rep.Unavailable != "":
		s.e.log.Debug("exec agent unavailable; the exec starts through the control socket", "sandbox_id", s.st.ID, "why", rep.Unavailable)
		return 0, nil, fmt.Errorf("%w: %s", errNoAgent, rep.Unavailable)
	case rep.Taken != "":
		return 0, nil, fmt.Errorf("%w: whether %q started in sandbox %q is unknown, so it was not started again: %s", errdefs.ErrDataLoss, pr.Args[0], s.st.ID, rep.Taken)
	case rep.HandOver != "":
		return 0, nil, &handOverError{sandbox: s.st.ID, why: rep.HandOver}
	case rep.Err != "":
		return 0, nil, errors.New(rep.Err)
	case rep.Errno != 0:
		// Nothing started. The sentry is asked in its turn, so that a
		// program that cannot start is refused, and told, one way only,
		// and a sandbox that is ending is seen to be.
		s.e.log.Debug("the exec agent could not start the program; the control socket is asked", "sandbox_id", s.st.ID, "errno", syscall.Errno(rep.Errno).Error())
		return 0, nil, fmt.Errorf("%w: %v", errNoAgent, syscall.Errno(rep.Errno))
	case rep.Pid <= 0:
		return 0, nil, fmt.Errorf("the agent relay answered pid %d", rep.Pid)
	}
	conn.SetDeadline(time.Time{})
	return rep.Pid, &agentExec{conn}, nil
}

// dialRelay connects to the sandbox's relay, waiting up to wait for one
// to listen. A socket no relay listens on (ECONNREFUSED: a killed
// supervisor's, until a new one binds its own) is waited for as a missing
// one is; it never stands for a relay that is there.
func (s *sandbox) dialRelay(ctx context.Context, wait time.Duration) (*net.UnixConn, error) {
	addr := &net.UnixAddr{Name: filepath.Join(s.bundle, agentSocket), Net: "unix"}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		conn, err := net.DialUnix("unix", nil, addr)
		if err == nil || s.st.Control == "" || !(errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)) {
			return conn, err
		}
		select {
		case <-wctx.Done():
			return nil, err
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Served implements engine.Awaiter: true once the relay listens. An exec
// that dials it then waits for the agent the relay starts as it begins,
// rather than starting through the control socket, where the sentry
// builds the container's seccomp program for every exec. A killed
// supervisor's socket counts too: an exec that finds no relay behind it
// goes through the control socket, and a run-code one waits (dialRelay).
func (s *sandbox) Served(ctx context.Context) bool {
	if !s.st.Agent || s.st.Control == "" {
		return false
	}
	sock := filepath.Join(s.bundle, agentSocket)
	for {
		if fi, err := os.Stat(sock); err == nil && fi.Mode().Type() == fs.ModeSocket {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// serveAgent runs the sandbox's exec agent and relays execs to it until
// ctx is done (Serve). A sandbox with no agent bound returns at once.
func (s *sandbox) serveAgent(ctx context.Context) error {
	sock := filepath.Join(s.bundle, agentSocket)
	if !s.st.Agent || s.st.Control == "" {
		return nil
	}
	if len(sock) >= len(unix.RawSockaddrUnix{}.Path) {
		s.e.log.Debug("bundle path too long for the agent's socket; execs start through the control socket", "sandbox_id", s.st.ID)
		return nil
	}
	os.Remove(sock) // a killed supervisor's
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return fmt.Errorf("serving the exec agent of %q: %w", s.st.ID, err)
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	r := &relay{s: s}
	defer r.stop()
	if _, err := r.agent(ctx); err != nil {
		s.e.log.Debug("starting the exec agent", "sandbox_id", s.st.ID, "err", err)
	}
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("serving the exec agent of %q: %w", s.st.ID, err)
		}
		go r.serve(ctx, conn)
	}
}

// relay holds a sandbox's agent, started again after it dies.
type relay struct {
	s  *sandbox
	mu sync.Mutex
	a  *agentProc
}

func (r *relay) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.a != nil {
		r.a.fail(errors.New("the relay stopped"))
	}
}

// agent returns the live agent, starting one if there is none.
func (r *relay) agent(ctx context.Context) (*agentProc, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.a != nil {
		select {
		case <-r.a.dead:
		default:
			return r.a, nil
		}
	}
	a, err := startAgentProc(ctx, r.s)
	if err != nil {
		return nil, err
	}
	r.a = a
	return a, nil
}

// agentProc is one running agent.
type agentProc struct {
	s   *sandbox
	pid int32
	w   *os.File // its stdin
	// r is its stdout, closed at fail: a process of the sandbox holding
	// it open keeps no reader of a dead agent going.
	r   *os.File
	wmu sync.Mutex
	// written counts the bytes written to w, under wmu.
	written int64

	mu     sync.Mutex
	nextID uint32
	execs  map[uint32]*relayed
	dead   chan struct{}
	err    error
}

// relayed is one exec in flight: the client's pipes and the agent's
// answers.
type relayed struct {
	agent   *agentProc // the agent it was handed to, and its id there
	id      uint32
	started chan agent.Frame // Started or Failed
	acks    chan struct{}
	drained chan struct{}
	out     [2]*stream // to the client's stdout and stderr; nil where none
}

// stream is one output of an exec on its way to the client's pipe, with
// a writer of its own: a client that stops reading stalls its own exec
// (the agent sends no more than agent.Window bytes ahead of the credit
// the writer gives back), never the others'.
type stream struct {
	x    *relayed // its exec: the agent to credit, and the id there
	typ  byte
	wake chan struct{}

	mu sync.Mutex
	w  *os.File // the client's end; nil once ended or broken
	// pending is the output the writer has not taken, in one buffer of
	// at most agent.Window bytes whatever the frames' sizes: with the
	// chunk being written, a stream holds at most twice the window.
	// queued counts both: everything not yet credited.
	pending []byte
	queued  int
	eof     bool // the agent ended it: close once written
	closed  bool // the exec was released or the agent died: close now
}

func newStream(x *relayed, typ byte, w *os.File) *stream {
	return &stream{x: x, typ: typ, w: w, wake: make(chan struct{}, 1)}
}

func (o *stream) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// push queues output from the agent; an empty b ends the stream. More
// than the window queued breaks the protocol.
func (o *stream) push(b []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.eof || o.closed:
		return nil
	case len(b) == 0:
		o.eof = true
	case o.queued+len(b) > agent.Window:
		return fmt.Errorf("%d bytes of %q output sent past the %d-byte window", o.queued+len(b), o.typ, agent.Window)
	case len(o.pending) == 0:
		o.pending = b // the reader's own slice: no copy
		o.queued += len(b)
	default:
		if cap(o.pending)-len(o.pending) < len(b) {
			// What pending holds and b are within the window, and so
			// is the new buffer.
			grown := make([]byte, len(o.pending), min(2*(len(o.pending)+len(b)), agent.Window))
			copy(grown, o.pending)
			o.pending = grown
		}
		o.pending = append(o.pending, b...)
		o.queued += len(b)
	}
	o.signal()
	return nil
}

// reopen undoes the end a failed agent put on a stream it never wrote.
func (o *stream) reopen() {
	o.mu.Lock()
	o.eof, o.pending, o.queued = false, nil, 0
	o.mu.Unlock()
}

// close stops the stream now, unwritten output and all; closing the
// client's end (non-blocking) ends a write in progress.
func (o *stream) close() {
	o.mu.Lock()
	o.closed = true
	w := o.w
	o.w = nil
	o.mu.Unlock()
	if w != nil {
		w.Close()
	}
	o.signal()
}

// maxWrite bounds one write to the client, and so the credit it gives
// back at once.
const maxWrite = agent.MaxPayload

// run writes the stream to the client, crediting the agent with every
// chunk passed on or, once the client is gone, dropped.
func (o *stream) run() {
	for {
		o.mu.Lock()
		for len(o.pending) == 0 && !o.eof && !o.closed {
			o.mu.Unlock()
			<-o.wake
			o.mu.Lock()
		}
		if o.closed || len(o.pending) == 0 {
			w := o.w
			o.w = nil
			o.mu.Unlock()
			if w != nil {
				w.Close()
			}
			return
		}
		// push only appends past pending's end, or to a new buffer, so b
		// is never written while the lock is not held.
		n := min(len(o.pending), maxWrite)
		b, w := o.pending[:n:n], o.w
		o.pending = o.pending[n:]
		if len(o.pending) == 0 {
			o.pending = nil // an idle stream holds no buffer
		}
		o.mu.Unlock()
		if w != nil {
			if _, err := w.Write(b); err != nil {
				o.mu.Lock()
				if o.w == w {
					o.w = nil
					w.Close()
				}
				o.mu.Unlock()
			}
		}
		o.mu.Lock()
		o.queued -= len(b)
		o.mu.Unlock()
		// x's agent and id are set before run starts, and kept.
		o.x.agent.send(agent.Credit, o.x.id, agent.CreditPayload(o.typ, len(b)))
	}
}

func startAgentProc(ctx context.Context, s *sandbox) (_ *agentProc, err error) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	defer func() {
		if err != nil {
			inW.Close()
			outR.Close()
		}
	}()
	pr := s.process
	pr.Args, pr.Cwd = []string{agentPath}, "/"
	c := s.control()
	pid, err := c.Start(ctx, &pr, [3]*os.File{inR, outW, null})
	inR.Close()
	outW.Close()
	if err != nil {
		return nil, fmt.Errorf("starting the exec agent: %w", err)
	}
	a := &agentProc{s: s, pid: pid, w: inW, r: outR, execs: map[uint32]*relayed{}, dead: make(chan struct{})}
	outR.SetReadDeadline(time.Now().Add(agentTimeout))
	rd := newAgentReader(outR)
	if f, err := rd.Read(); err != nil || f.Type != agent.Ready || string(f.Payload) != agent.Version {
		c.Kill(context.WithoutCancel(ctx), int(pid), false)
		return nil, fmt.Errorf("the exec agent did not say it is ready (%v, %q frame %q); rerun `make setup` to install this airlock's agent", err, f.Type, f.Payload)
	}
	outR.SetReadDeadline(time.Time{})
	go a.read(rd, outR)
	go func() {
		// The sentry says when the agent ends, even should a process of
		// the sandbox hold its stdout open.
		_, err := c.Wait(context.Background(), pid)
		a.fail(fmt.Errorf("the exec agent ended (%v)", err))
	}()
	return a, nil
}

// newAgentReader reads the agent's frames from its stdout, buffered: a
// frame's header and a small payload take no syscall of their own.
func newAgentReader(out *os.File) *agent.Reader {
	return agent.NewReader(bufio.NewReaderSize(out, 64<<10), agent.MaxPayload)
}

// fail marks the agent dead, kills it, and ends every exec's output.
func (a *agentProc) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.dead:
		return
	default:
	}
	a.err = err
	a.w.Close()
	if a.r != nil {
		a.r.Close()
	}
	a.s.control().Kill(context.Background(), int(a.pid), false)
	for id, x := range a.execs {
		// What the agent sent before it failed still reaches the client.
		for _, o := range x.out {
			if o != nil {
				o.push(nil)
			}
		}
		delete(a.execs, id)
	}
	close(a.dead)
}

func (x *relayed) closeOut() {
	for _, o := range x.out {
		if o != nil {
			o.close()
		}
	}
}

// send writes one frame to the agent, bounded in time: an agent that
// stops reading is killed.
func (a *agentProc) send(typ byte, id uint32, payload []byte) error {
	_, err := a.sendAt(typ, id, payload)
	return err
}

// sendAt is send, and says where the frame starts in all that was
// written to the agent.
func (a *agentProc) sendAt(typ byte, id uint32, payload []byte) (int64, error) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	at := a.written
	a.w.SetWriteDeadline(time.Now().Add(agentTimeout))
	err := agent.Write(a.w, typ, id, payload)
	if err != nil {
		a.fail(fmt.Errorf("writing to the exec agent: %w", err))
		return at, err
	}
	a.written += int64(agent.FrameSize(payload))
	return at, nil
}

// unread reports whether the agent has read nothing written from offset
// at on: all of it still waits in the pipe. The agent reads frames with
// exact reads; a pipe it cannot be asked about counts as read.
func (a *agentProc) unread(at int64) bool {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	rc, err := a.w.SyscallConn()
	if err != nil {
		return false
	}
	pending, ierr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) {
		pending, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD, on either end of a pipe
	}); err != nil || ierr != nil {
		return false
	}
	return a.written-int64(pending) <= at
}

// read dispatches the agent's frames until it ends. Every frame is
// hostile: one that breaks the protocol kills the agent.
func (a *agentProc) read(rd *agent.Reader, out *os.File) {
	defer out.Close()
	for {
		f, err := rd.Read()
		if err == nil {
			err = a.dispatch(f)
		}
		if err != nil {
			a.fail(fmt.Errorf("reading the exec agent: %w", err))
			return
		}
	}
}

func (a *agentProc) dispatch(f agent.Frame) error {
	a.mu.Lock()
	x := a.execs[f.ID]
	a.mu.Unlock()
	switch f.Type {
	case agent.Started, agent.Failed, agent.HandOverFailed:
		if f.Type != agent.HandOverFailed { // its payload is text
			if _, err := agent.ParseUint32(f.Payload); err != nil {
				return err
			}
		}
		if x != nil {
			select {
			case x.started <- f:
			default:
			}
		}
	case agent.Stdout, agent.Stderr:
		// Frames of an exec already released, or of a stream it does
		// not have, are dropped.
		i := agent.Stream(f.Type)
		if x == nil || x.out[i] == nil {
			return nil
		}
		return x.out[i].push(f.Payload)
	case agent.Ack:
		if x != nil {
			select {
			case x.acks <- struct{}{}:
			default:
			}
		}
	case agent.Drained:
		if x != nil {
			select {
			case x.drained <- struct{}{}:
			default:
			}
		}
	default:
		return fmt.Errorf("unexpected %q frame", f.Type)
	}
	return nil
}

// serve relays one client's exec.
func (r *relay) serve(ctx context.Context, conn *net.UnixConn) {
	defer conn.Close()
	// The request comes at once; the answer may wait for an agent's start
	// and its answer, and has a write deadline of its own.
	conn.SetReadDeadline(time.Now().Add(agentTimeout))
	req, files, err := readRelayRequest(conn)
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	reply := func(rep relayReply) bool {
		b, _ := json.Marshal(rep)
		conn.SetWriteDeadline(time.Now().Add(agentTimeout))
		_, err := conn.Write(append(b, '\n'))
		return err == nil
	}
	if err != nil {
		reply(relayReply{Unavailable: "the agent relay could not read the exec: " + err.Error()})
		return
	}
	x := &relayed{started: make(chan agent.Frame, 1), acks: make(chan struct{}, 1), drained: make(chan struct{}, 1)}
	// Only the agent's output may hold the client's pipes open: the
	// copies not relayed are closed now, so the client sees its ends.
	x.out[0], files[1] = newStream(x, agent.Stdout, files[1]), nil
	if req.Merged {
		files[2].Close()
	} else {
		x.out[1] = newStream(x, agent.Stderr, files[2])
	}
	files[2] = nil
	if !req.Stdin {
		files[0].Close()
		files[0] = nil
	}
	defer func() {
		if a := x.agent; a != nil {
			a.mu.Lock()
			defer a.mu.Unlock()
			delete(a.execs, x.id)
		}
		x.closeOut()
	}()
	// A spawn that could not be written was never read: an agent that
	// died since the last exec is replaced once.
	spawn, _ := json.Marshal(req)
	var a *agentProc
	var at int64 // where the spawn starts in what a was sent
	for try := 0; ; try++ {
		if a, err = r.agent(ctx); err != nil {
			reply(relayReply{Unavailable: err.Error()})
			return
		}
		a.mu.Lock()
		a.nextID++
		x.agent, x.id = a, a.nextID
		a.execs[x.id] = x
		a.mu.Unlock()
		if at, err = a.sendAt(agent.Spawn, x.id, spawn); err == nil {
			break
		}
		// The dead agent ended this exec's streams, but it never read the
		// spawn: nothing of it was sent.
		for _, o := range x.out {
			if o != nil {
				o.reopen()
			}
		}
		if try == 1 {
			reply(relayReply{Unavailable: "the exec agent ended as it was handed the exec"})
			return
		}
	}
	id := x.id
	var f agent.Frame
	select {
	case f = <-x.started:
	case <-a.dead:
		reply(relayReply{Err: fmt.Sprintf("the sandbox's exec agent ended while starting the exec (%v); try again", a.err)})
		return
	case <-time.After(agentTimeout):
		// A stopped or wedged agent (a program of the sandbox can stop
		// it) is killed, and the next exec starts a new one. This exec
		// goes to the control socket only if the agent never read its
		// spawn: once read, the program may be running, and it must not
		// run twice.
		a.s.control().Kill(context.Background(), int(a.pid), false)
		taken := !a.unread(at)
		a.fail(errors.New("no answer to a spawn"))
		if taken {
			reply(relayReply{Taken: fmt.Sprintf("the sandbox's exec agent read the exec but did not answer in %v, and was killed (a process of the sandbox may have stopped it)", agentTimeout)})
			return
		}
		reply(relayReply{Unavailable: fmt.Sprintf("the sandbox's exec agent did not answer in %v and was killed", agentTimeout)})
		return
	}
	if f.Type == agent.HandOverFailed {
		// Only as the answer to a run-code client's Spawn: the job's pid
		// was never given, so nothing of the exec runs. A job can write no
		// frame before it exists, and its own output and exit are never
		// read for this.
		if !agent.RunCode(req.Argv) {
			a.fail(errors.New("a hand-over failure answered an exec that is no run-code job"))
			reply(relayReply{Err: "the sandbox's exec agent broke the protocol answering the exec; try again"})
			return
		}
		why := string(f.Payload)
		if len(why) > maxHandOverWhy {
			why = why[:maxHandOverWhy]
		}
		if why == "" {
			why = "no reason given"
		}
		reply(relayReply{HandOver: why})
		return
	}
	v, _ := agent.ParseUint32(f.Payload)
	if f.Type == agent.Failed {
		reply(relayReply{Errno: int(v)})
		return
	}
	if v == 0 || v > 1<<22 {
		a.fail(fmt.Errorf("pid %d", v))
		reply(relayReply{Err: fmt.Sprintf("the sandbox's exec agent answered pid %d", v)})
		return
	}
	if !reply(relayReply{Pid: int32(v)}) {
		a.send(agent.Reap, id, nil)
		return
	}
	for _, o := range x.out {
		if o != nil {
			go o.run()
		}
	}
	conn.SetDeadline(time.Time{})
	done := make(chan struct{})
	if req.Stdin {
		go r.pumpStdin(a, id, x, files[0], done)
		files[0] = nil
	}
	// The client closes the connection once it has waited for the exec,
	// saying so; before that, it may ask for a drain.
	var drain sync.Once
	waited := false
	for b := make([]byte, 64); ; {
		n, err := conn.Read(b)
		if bytes.IndexByte(b[:n], relayDrain) >= 0 {
			drain.Do(func() { go r.drain(a, x) })
		}
		waited = waited || bytes.IndexByte(b[:n], relayWaited) >= 0
		if err != nil {
			break
		}
	}
	close(done)
	if !waited {
		// Killed before the Reap, while the agent holds the pid (a
		// zombie at worst): never another process's. An agent that died
		// no longer holds it.
		select {
		case <-a.dead:
		default:
			kctx, cancel := context.WithTimeout(context.Background(), agentTimeout)
			if err := a.s.control().KillTree(kctx, int(v)); err != nil {
				r.s.e.log.Debug("killing the program of an exec whose client vanished", "sandbox_id", r.s.st.ID, "pid", v, "err", err)
			}
			cancel()
		}
	}
	a.send(agent.Reap, id, nil)
}

// drain has the agent send what x's pipes hold, then ends x's output
// once that is written: a process the exec left running no longer holds
// the client's pipes, and nothing the exec wrote is lost to a slow
// agent. An agent that does not answer in agentTimeout is killed.
func (r *relay) drain(a *agentProc, x *relayed) {
	if a.send(agent.Drain, x.id, nil) == nil {
		select {
		case <-x.drained:
		case <-a.dead:
		case <-time.After(agentTimeout):
			// Stopped or wedged, as at a spawn: the next exec gets a new one.
			a.fail(fmt.Errorf("no answer to a drain in %v", agentTimeout))
		}
	}
	for _, o := range x.out {
		if o != nil {
			o.push(nil)
		}
	}
}

// pumpStdin forwards the client's stdin to the agent, one frame in
// flight at a time.
func (r *relay) pumpStdin(a *agentProc, id uint32, x *relayed, in *os.File, done <-chan struct{}) {
	defer in.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-done:
		case <-a.dead:
		case <-stop:
			return
		}
		in.Close() // unblocks the read
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if a.send(agent.Stdin, id, buf[:n]) != nil {
				return
			}
			select {
			case <-x.acks:
			case <-done:
				return
			case <-a.dead:
				return
			}
		}
		if err != nil {
			a.send(agent.Stdin, id, nil)
			return
		}
	}
}

// readRelayRequest reads a request and its three descriptors, made
// non-blocking so that closing them ends a read or write in progress.
func readRelayRequest(conn *net.UnixConn) (agent.SpawnArgs, []*os.File, error) {
	var req agent.SpawnArgs
	head, oob := make([]byte, 4), make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := conn.ReadMsgUnix(head, oob)
	var fds []int
	if oobn > 0 {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for _, m := range msgs {
				got, _ := unix.ParseUnixRights(&m)
				fds = append(fds, got...)
			}
		}
	}
	files := make([]*os.File, 0, 3)
	for _, fd := range fds {
		unix.SetNonblock(fd, true)
		files = append(files, os.NewFile(uintptr(fd), "exec stdio"))
	}
	if err != nil {
		return req, files, err
	}
	if len(files) != 3 {
		return req, files, fmt.Errorf("%d descriptors, not 3", len(files))
	}
	if _, err := io.ReadFull(conn, head[n:]); err != nil {
		return req, files, err
	}
	size, _ := agent.ParseUint32(head)
	if size > agent.MaxSpawn {
		return req, files, fmt.Errorf("a request of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(conn, b); err != nil {
		return req, files, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return req, files, dec.Decode(&req)
}
