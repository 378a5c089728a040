// Command airlock-agent runs inside a gVisor sandbox and forks the
// sandbox's execs, so that each starts already under the container's
// seccomp filter (see package internal/agent). It has no privilege of its
// own: the host starts it as it starts any exec, and it exits when the
// host closes its stdin. As `airlock-agent spawner` (started by the
// sandbox's init) and `airlock-agent spawn -- ARGV…` it starts detached
// programs that survive a pause (internal/agent/spawner.go). As
// `airlock-agent run-code -- FILE ARGS…` it runs one job through a
// run-code template's fork server (internal/forkserver); the agent serves
// an exec of that argv itself, handing the job over without a client
// process, and answers HandOverFailed when it could not (runcode.go).
package main

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/forkserver"
)

func main() {
	runtime.GOMAXPROCS(1)
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "spawner":
			runSpawner()
		case "spawn":
			args := os.Args[2:]
			if len(args) > 0 && args[0] == "--" {
				args = args[1:]
			}
			runSpawn(args)
		case "run-code":
			args := os.Args[2:]
			if len(args) > 0 && args[0] == "--" {
				args = args[1:]
			}
			runRunCode(args)
		case "run-code-prime":
			runRunCodePrime()
		}
		os.Exit(2)
	}
	a := &server{out: os.Stdout, execs: map[uint32]*execution{}, pending: map[int]bool{}}
	signal.Ignore(syscall.SIGPIPE) // a closed output pipe is an error, not an exit
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	go func() {
		for range sigs {
			a.reapPending()
		}
	}()
	if a.send(agent.Ready, 0, []byte(agent.Version)) != nil {
		os.Exit(1)
	}
	rd := agent.NewReader(os.Stdin, agent.MaxSpawn)
	for {
		f, err := rd.Read()
		if err != nil {
			os.Exit(0) // the host is gone; the execs live on under the sandbox's init
		}
		a.handle(f)
	}
}

type server struct {
	out io.Writer  // the host's frames: stdout
	wmu sync.Mutex // one frame at a time on out

	mu      sync.Mutex
	execs   map[uint32]*execution
	pending map[int]bool // pids the host has waited for, not yet exited
}

// execution is one exec's agent side.
type execution struct {
	pid     int
	stdin   chan []byte // Stdin frames; closed on Reap
	in      *os.File    // the write end of the exec's stdin, or nil
	outs    []*output   // stdout, then stderr unless merged
	credits [2]*credit  // what each output may send ahead (stdout, stderr)
	// job is a run-code job's connection to the fork server, closed on
	// Reap: the server reaps the job then.
	job *forkserver.Conn
}

// output is the read end of one of an exec's output pipes, and the
// drains waiting for it.
type output struct {
	r      *os.File
	mu     sync.Mutex
	ended  bool            // its end was sent, or it stopped
	drains []chan struct{} // closed once what the pipe held is sent
}

// drain asks for what the pipe holds now, and returns a channel closed
// once it is sent. The read in progress is cut by the deadline.
func (o *output) drain() <-chan struct{} {
	ch := make(chan struct{})
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended {
		close(ch)
		return ch
	}
	o.drains = append(o.drains, ch)
	o.r.SetReadDeadline(time.Now())
	return ch
}

// drainsDue takes the drains asked for so far, and lets reads wait again.
func (o *output) drainsDue(ended bool) []chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.drains
	o.drains = nil
	o.ended = o.ended || ended
	if !o.ended {
		o.r.SetReadDeadline(time.Time{})
	}
	return d
}

func closeAll(chs []chan struct{}) {
	for _, ch := range chs {
		close(ch)
	}
}

// credit is what one output stream may still send before the host
// credits more back (agent.Window at first).
type credit struct {
	mu      sync.Mutex
	n       int
	stopped bool
	wake    chan struct{}
}

func newCredit() *credit { return &credit{n: agent.Window, wake: make(chan struct{}, 1)} }

func (c *credit) add(n int) {
	c.mu.Lock()
	c.n += n
	c.mu.Unlock()
	c.signal()
}

func (c *credit) stop() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.signal()
}

func (c *credit) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take waits for credit and returns up to max of it, to be spent; 0 once
// stopped.
func (c *credit) take(max int) int {
	for {
		c.mu.Lock()
		n, stopped := min(c.n, max), c.stopped
		c.mu.Unlock()
		if stopped {
			return 0
		}
		if n > 0 {
			return n
		}
		<-c.wake
	}
}

func (c *credit) spend(n int) {
	c.mu.Lock()
	c.n -= n
	c.mu.Unlock()
}

func (a *server) send(typ byte, id uint32, payload []byte) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return agent.Write(a.out, typ, id, payload)
}

func (a *server) handle(f agent.Frame) {
	a.mu.Lock()
	x := a.execs[f.ID]
	a.mu.Unlock()
	switch f.Type {
	case agent.Spawn:
		if x == nil {
			a.spawn(f.ID, f.Payload)
		}
	case agent.Stdin:
		if x != nil && x.in != nil {
			select {
			case x.stdin <- f.Payload:
			default: // over the window of one: the host broke the protocol
			}
		}
	case agent.Credit:
		typ, n, err := agent.ParseCredit(f.Payload)
		if x != nil && err == nil && n <= agent.Window {
			x.credits[agent.Stream(typ)].add(int(n))
		}
	case agent.Drain:
		if x == nil {
			return
		}
		var drained []<-chan struct{}
		for _, o := range x.outs {
			drained = append(drained, o.drain())
		}
		go func() {
			for _, ch := range drained {
				<-ch
			}
			a.send(agent.Drained, f.ID, nil)
		}()
	case agent.Reap:
		if x == nil {
			return
		}
		for _, c := range x.credits {
			c.stop()
		}
		a.mu.Lock()
		delete(a.execs, f.ID)
		a.pending[x.pid] = true
		a.mu.Unlock()
		if x.in != nil {
			close(x.stdin)
		}
		x.close()
		a.reapPending()
	}
}

// reapPending reaps the exited execs the host has waited for, and no
// other process: one the host has not waited for stays a zombie, so the
// sentry can still report its status.
func (a *server) reapPending() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for pid := range a.pending {
		if n, err := syscall.Wait4(pid, nil, syscall.WNOHANG, nil); n == pid || errors.Is(err, syscall.ECHILD) {
			delete(a.pending, pid)
		}
	}
}

func (a *server) spawn(id uint32, payload []byte) {
	var s agent.SpawnArgs
	if err := json.Unmarshal(payload, &s); err != nil || len(s.Argv) == 0 {
		a.send(agent.Failed, id, agent.Uint32(uint32(syscall.EINVAL)))
		return
	}
	if job, ok := runCodeJob(&s); ok {
		// It may wait for the fork server: the other execs go on.
		go a.spawnRunCode(forkserver.Socket, id, &s, job)
		return
	}
	x, pid, err := start(&s)
	if err != nil {
		errno := syscall.EIO
		errors.As(err, &errno)
		a.send(agent.Failed, id, agent.Uint32(uint32(errno)))
		return
	}
	a.started(id, x, pid)
}

// started records x, exec id's, started as pid, answers the host and
// relays its stdio.
func (a *server) started(id uint32, x *execution, pid int) {
	x.pid = pid
	a.mu.Lock()
	a.execs[id] = x
	a.mu.Unlock()
	a.send(agent.Started, id, agent.Uint32(uint32(pid)))
	types := []byte{agent.Stdout, agent.Stderr}
	for i, o := range x.outs {
		go a.copyOut(id, types[i], o, x.credits[i])
	}
	if x.in != nil {
		go a.copyIn(id, x)
	}
}

// start forks and execs s in a session of its own, with pipes for its
// stdio.
func start(s *agent.SpawnArgs) (x *execution, pid int, err error) {
	path, err := lookPath(s.Argv[0], s.Env, s.Dir)
	if err != nil {
		return nil, 0, err
	}
	x, child, err := pipes(s)
	if err != nil {
		return nil, 0, err
	}
	defer closeFiles(child[:])
	pid, err = syscall.ForkExec(path, s.Argv, &syscall.ProcAttr{
		Dir:   s.Dir,
		Env:   s.Env,
		Files: []uintptr{child[0].Fd(), child[1].Fd(), child[2].Fd()},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		x.close()
		return nil, 0, err
	}
	return x, pid, nil
}

// pipes makes an exec's stdio: child is what the program gets as its
// stdin, stdout and stderr (stdout twice when merged), for the caller to
// close once passed on.
func pipes(s *agent.SpawnArgs) (*execution, [3]*os.File, error) {
	x := &execution{stdin: make(chan []byte, 1), credits: [2]*credit{newCredit(), newCredit()}}
	var made []*os.File
	fail := func(err error) (*execution, [3]*os.File, error) {
		closeFiles(made)
		x.close()
		return nil, [3]*os.File{}, err
	}
	if s.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		made, x.in = append(made, r), w
	} else {
		null, err := os.Open(os.DevNull)
		if err != nil {
			return fail(err)
		}
		made = append(made, null)
	}
	for range 2 - boolInt(s.Merged) {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		made = append(made, w)
		x.outs = append(x.outs, &output{r: r})
	}
	var child [3]*os.File
	copy(child[:], made)
	if s.Merged {
		child[2] = child[1]
	}
	return x, child, nil
}

// closeFiles closes each file once.
func closeFiles(files []*os.File) {
	seen := map[*os.File]bool{}
	for _, f := range files {
		if f != nil && !seen[f] {
			seen[f] = true
			f.Close()
		}
	}
}

// close closes the agent's ends of an exec's pipes, and its job's
// connection to the fork server.
func (x *execution) close() {
	for _, o := range x.outs {
		o.r.Close()
	}
	if x.in != nil {
		x.in.Close()
	}
	if x.job != nil {
		x.job.Close()
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lookPath finds file as execvp would, in the exec's own PATH.
func lookPath(file string, env []string, dir string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, file)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", syscall.ENOENT
}

// copyOut sends an output of exec id to the host, within its credit: a
// host that has not passed the output on leaves the program blocked on
// its full pipe. A drain cuts the read in progress; what the pipe then
// holds is sent without waiting for more.
func (a *server) copyOut(id uint32, typ byte, o *output, c *credit) {
	ended := false
	defer func() {
		o.r.Close()
		closeAll(o.drainsDue(true))
	}()
	buf := make([]byte, 32<<10)
	for !ended {
		max := c.take(len(buf))
		if max == 0 {
			return // reaped
		}
		n, err := o.r.Read(buf[:max])
		if errors.Is(err, os.ErrDeadlineExceeded) {
			due := o.drainsDue(false)
			ended = a.sendHeld(id, typ, o.r, c, buf)
			closeAll(due)
			continue
		}
		if n > 0 {
			if a.send(typ, id, buf[:n]) != nil {
				return
			}
			c.spend(n)
		}
		if err != nil {
			a.send(typ, id, nil)
			return
		}
	}
}

// sendHeld sends what r holds now, within c's credit, and reports
// whether r (or the connection to the host) ended.
func (a *server) sendHeld(id uint32, typ byte, r *os.File, c *credit, buf []byte) bool {
	err := agent.SendHeld(r, buf, func() int { return c.take(len(buf)) }, func(b []byte) error {
		if err := a.send(typ, id, b); err != nil {
			return err
		}
		c.spend(len(b))
		return nil
	})
	switch {
	case err == nil:
		return false
	case err != agent.ErrStopped:
		a.send(typ, id, nil) // r's end
	}
	return true
}

func (a *server) copyIn(id uint32, x *execution) {
	defer x.in.Close()
	for b := range x.stdin {
		if len(b) == 0 {
			return
		}
		x.in.Write(b) // a program that stopped reading loses the rest
		a.send(agent.Ack, id, nil)
	}
}
