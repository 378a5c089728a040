package forkserver

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Job is what the client sends: the program (argv[0] is the Python file
// run as __main__; sys.argv is argv), its working directory and its whole
// environment.
type Job struct {
	Argv []string `json:"argv"`
	Dir  string   `json:"dir"`
	Env  []string `json:"env"`
}

// reply is the server's answer: its first line holds Pid alone, its
// second exactly one of Exit and Signal.
type reply struct {
	Pid    *int `json:"pid"`
	Exit   *int `json:"exit"`
	Signal *int `json:"signal"`
}

// ErrNoServer is a dial's failure: nothing was handed over.
var ErrNoServer = errors.New("connecting to the fork server")

// Conn is one job handed to the server: its connection, open until the
// job's status has been read or the job is to end (the server kills a
// job whose client goes first, and reaps one only once its client has
// gone, so that its pid stays waitable until then).
type Conn struct {
	c *net.UnixConn
	r *bufio.Reader
}

// Start hands job to the server at addr with stdio (descriptors) as its
// stdin, stdout and stderr, and returns the job's pid in the sandbox.
// It dials once, or retries a socket that refuses it for up to wait. An
// error wrapping ErrNoServer handed nothing over; any other may have,
// and the job, if it started, ends with the connection, which is closed.
func Start(addr string, wait time.Duration, job Job, stdio [3]int) (*Conn, int, error) {
	if len(job.Argv) == 0 {
		return nil, 0, errors.New("no program given")
	}
	if job.Env == nil {
		job.Env = []string{} // the server takes a list
	}
	body, err := json.Marshal(job)
	if err != nil {
		return nil, 0, err
	}
	if len(body) > MaxJob {
		return nil, 0, fmt.Errorf("the job is %d bytes, over the server's %d (a large environment?)", len(body), MaxJob)
	}
	c, err := dial(addr, wait)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w (%s)", ErrNoServer, err, diagnose(addr))
	}
	if err := hand(c, body, stdio); err != nil {
		c.Close()
		return nil, 0, fmt.Errorf("handing the job to the fork server: %w", err)
	}
	jc := &Conn{c: c, r: replies(c)}
	c.SetReadDeadline(time.Now().Add(PidWait))
	pid, err := readPid(jc.r)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		c.Close()
		return nil, 0, err
	}
	return jc, pid, nil
}

// Prime asks the server at addr to have its spare child touch what it
// holds before any job (see Script): a prime request in a job's framing,
// with stdio passed as a job's would be, and one status line back, which
// must be exit 0. It retries a socket that refuses it for up to DialWait.
func Prime(addr string, stdio [3]*os.File) error {
	c, err := dial(addr, DialWait)
	if err != nil {
		return fmt.Errorf("%w: %w (%s)", ErrNoServer, err, diagnose(addr))
	}
	defer c.Close()
	if err := hand(c, []byte(`{"prime":true}`), fdsOf(stdio)); err != nil {
		return fmt.Errorf("sending the prime: %w", err)
	}
	code, err := readStatus(replies(c))
	switch {
	case err != nil:
		return fmt.Errorf("the prime: %w", err)
	case code != 0:
		return errors.New("the fork server has no spare child to prime (a job ran, or the spare is gone)")
	}
	return nil
}

// hand sends one request in the server's framing: a 4-byte length, then
// body, with stdio's three descriptors passed alongside its first bytes.
func hand(c *net.UnixConn, body []byte, stdio [3]int) error {
	msg := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	msg = append(msg, body...)
	n, _, err := c.WriteMsgUnix(msg, syscall.UnixRights(stdio[0], stdio[1], stdio[2]), nil)
	if err == nil && n < len(msg) {
		_, err = c.Write(msg[n:])
	}
	return err
}

// fdsOf is stdio's descriptors.
func fdsOf(stdio [3]*os.File) [3]int {
	return [3]int{int(stdio[0].Fd()), int(stdio[1].Fd()), int(stdio[2].Fd())}
}

// Close ends the job if it still runs, and lets the server reap it.
func (c *Conn) Close() error { return c.c.Close() }

// Status waits for the job's status, as an exit code (128+N for signal N).
func (c *Conn) Status() (int, error) { return readStatus(c.r) }

// replies reads the server's reply lines from r, which holds at most two.
func replies(r io.Reader) *bufio.Reader {
	return bufio.NewReaderSize(io.LimitReader(r, 2*MaxReply), MaxReply)
}

// readPid reads the first reply: the job's pid.
func readPid(r *bufio.Reader) (int, error) {
	var rep reply
	if err := readReply(r, &rep, "pid"); err != nil {
		return 0, err
	}
	if rep.Pid == nil || rep.Exit != nil || rep.Signal != nil || *rep.Pid < 2 || *rep.Pid > 1<<22 {
		return 0, errors.New("the fork server's first reply is no pid")
	}
	return *rep.Pid, nil
}

// readStatus reads the second reply: the job's status.
func readStatus(r *bufio.Reader) (int, error) {
	var rep reply
	if err := readReply(r, &rep, "status"); err != nil {
		return 0, err
	}
	switch {
	case rep.Pid == nil && rep.Exit != nil && rep.Signal == nil && *rep.Exit >= 0 && *rep.Exit <= 255:
		return *rep.Exit, nil
	case rep.Pid == nil && rep.Signal != nil && rep.Exit == nil && *rep.Signal >= 1 && *rep.Signal <= 64:
		return 128 + *rep.Signal, nil
	}
	return 0, errors.New("the fork server's reply is no exit status")
}

// readReply reads and decodes one reply line, the job's what.
func readReply(r *bufio.Reader, rep *reply, what string) error {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("the fork server closed the connection without the job's %s", what)
		}
		return fmt.Errorf("reading the job's %s: %w", what, err)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(rep); err != nil {
		return fmt.Errorf("the fork server's reply %q is malformed: %w", line, err)
	}
	if dec.More() {
		return fmt.Errorf("the fork server's reply %q is malformed: more than one object", line)
	}
	return nil
}

// Run hands job to the server at addr with stdio as its stdin, stdout
// and stderr, and waits for its status, which it returns as an exit code
// (128+N for signal N). The connection stays open until then: the server
// kills the job when it closes, so a client killed (an exec's timeout)
// ends its job. An error means the job was not handed over, or no valid
// status came back.
func Run(addr string, job Job, stdio [3]*os.File) (int, error) {
	c, _, err := Start(addr, DialWait, job, fdsOf(stdio))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.Status()
}

// PidWait bounds the wait for the job's pid, which the server sends as
// soon as the job has a process.
const PidWait = 5 * time.Second

// DialWait bounds how long the client retries a socket that refuses it
// (no listener yet, or none at all).
const DialWait = 2 * time.Second

// dial connects to addr, retrying while nothing listens there, up to
// wait: no job has been handed over then, so nothing runs twice.
func dial(addr string, wait time.Duration) (*net.UnixConn, error) {
	deadline := time.Now().Add(wait)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: addr, Net: "unix"})
		if err == nil || !(errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EAGAIN)) || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(wait)
	}
}

// diagnose says, for a failed dial's error, whether a socket listens on
// addr (an abstract name, "@" first) and which fork server processes
// live: a server gone and one that stopped accepting fail alike.
func diagnose(addr string) string {
	var say []string
	if b, err := os.ReadFile("/proc/net/unix"); err != nil {
		say = append(say, "/proc/net/unix unreadable: "+err.Error())
	} else if listens(b, addr) {
		say = append(say, "a socket listens on "+addr)
	} else {
		say = append(say, "no socket listens on "+addr)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("\x00-c\x00"+Script[:min(len(Script), 40)])) {
			continue
		}
		dir := filepath.Dir(p)
		state := "?"
		if st, err := os.ReadFile(filepath.Join(dir, "stat")); err == nil {
			// pid (comm) S ...: the state follows the last ')'.
			if i := bytes.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) {
				state = string(st[i+2])
			}
		}
		pids = append(pids, filepath.Base(dir)+" "+state)
		if len(pids) == 4 {
			break
		}
	}
	if len(pids) == 0 {
		say = append(say, "no fork server process")
	} else {
		say = append(say, "fork server processes (pid state): "+strings.Join(pids, ", "))
	}
	return strings.Join(say, "; ")
}

// listens reports whether table, /proc/net/unix, has a listening socket
// (flag __SO_ACCEPTCON) bound to addr.
func listens(table []byte, addr string) bool {
	for line := range strings.SplitSeq(string(table), "\n") {
		// Num RefCount Protocol Flags Type St Inode Path
		f := strings.Fields(line)
		if len(f) == 8 && f[7] == addr && f[3] == "00010000" {
			return true
		}
	}
	return false
}
