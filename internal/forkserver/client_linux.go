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

// reply is the server's answer: exactly one of its fields.
type reply struct {
	Exit   *int `json:"exit"`
	Signal *int `json:"signal"`
}

// Run hands job to the server at addr with stdio as its stdin, stdout
// and stderr, and waits for its status, which it returns as an exit code
// (128+N for signal N). The connection stays open until then: the server
// kills the job when it closes, so a client killed (an exec's timeout)
// ends its job. An error means the job was not handed over, or no valid
// status came back.
func Run(addr string, job Job, stdio [3]*os.File) (int, error) {
	if len(job.Argv) == 0 {
		return 0, errors.New("no program given")
	}
	body, err := json.Marshal(job)
	if err != nil {
		return 0, err
	}
	if len(body) > MaxJob {
		return 0, fmt.Errorf("the job is %d bytes, over the server's %d (a large environment?)", len(body), MaxJob)
	}
	c, err := dial(addr)
	if err != nil {
		return 0, fmt.Errorf("connecting to the fork server: %w (%s)", err, diagnose(addr))
	}
	defer c.Close()
	msg := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	msg = append(msg, body...)
	fds := syscall.UnixRights(int(stdio[0].Fd()), int(stdio[1].Fd()), int(stdio[2].Fd()))
	// The descriptors go with the first bytes; the rest follows.
	n, _, err := c.WriteMsgUnix(msg, fds, nil)
	if err == nil && n < len(msg) {
		_, err = c.Write(msg[n:])
	}
	if err != nil {
		return 0, fmt.Errorf("handing the job to the fork server: %w", err)
	}
	return readStatus(c)
}

// DialWait bounds how long the client retries a socket that refuses it
// (no listener yet, or none at all).
const DialWait = 2 * time.Second

// dial connects to addr, retrying while nothing listens there, up to
// DialWait: no job has been handed over then, so nothing runs twice.
func dial(addr string) (*net.UnixConn, error) {
	deadline := time.Now().Add(DialWait)
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

// readStatus reads and checks the server's one reply line.
func readStatus(r io.Reader) (int, error) {
	line, err := bufio.NewReaderSize(io.LimitReader(r, MaxReply), MaxReply).ReadSlice('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			return 0, errors.New("the fork server closed the connection without the job's status")
		}
		return 0, fmt.Errorf("reading the job's status: %w", err)
	}
	var rep reply
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		return 0, fmt.Errorf("the fork server's reply %q is malformed: %w", line, err)
	}
	if dec.More() {
		return 0, fmt.Errorf("the fork server's reply %q is malformed: more than one object", line)
	}
	switch {
	case rep.Exit != nil && rep.Signal == nil && *rep.Exit >= 0 && *rep.Exit <= 255:
		return *rep.Exit, nil
	case rep.Signal != nil && rep.Exit == nil && *rep.Signal >= 1 && *rep.Signal <= 64:
		return 128 + *rep.Signal, nil
	}
	return 0, fmt.Errorf("the fork server's reply %q is no exit status", bytes.TrimSpace(line))
}
